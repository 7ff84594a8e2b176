"""Where an RF=3 acks=all produce spends its time, two ways.

Throughput (default): the replication benchmark's kcat run against a 3-broker cluster whose
brokers run under cProfile, then each broker's top functions. cProfile slows Python code about
twofold, so the throughput printed here is not comparable with bench/replication.py; read the shares.

Request rate (`--rate N`): a confluent-kafka producer sends N records/s with linger.ms=0 (one
Produce request per record, as bench/replication.py's latency runs) while py-spy samples every
broker (not a project dependency: `.venv/bin/pip install py-spy`); it prints, summed over the
brokers, the functions with the most samples on the CPU, by own time and including callees, and
the brokers' CPU-microseconds per record.

Run: .venv/bin/python bench/profile_replication.py [--rate 2000 [--seconds 20]]
"""

import argparse
import collections
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from produce_latency import produce_latency  # bench/ is sys.path[0] when run as a script
from replication import CpuMeter, Target, kcat_produce
from throughput import write_records

SIZE = 100


PROFILED_BROKER = """
import cProfile, sys
from odradek.broker import server
out, sys.argv = sys.argv[1], ["odradek"] + sys.argv[2:]
server.exit_after_clean_shutdown = lambda code: None  # its os._exit would skip the stats file
profile = cProfile.Profile()
try:
    profile.runcall(server.main)
finally:
    profile.dump_stats(out)
"""
"""`python -c PROFILED_BROKER STATS_FILE broker ARGS...`: a broker under cProfile that writes its
stats file when it stops."""


def profile_brokers(out_dir: Path):
    """Makes LocalCluster start `odradek broker` under cProfile, one stats file per broker."""
    from odradek.dev import cluster

    plain_argv = cluster.ManagedProcess.argv

    def argv(self):
        args = plain_argv(self)
        if self.role != "broker":
            return args
        at = args.index("broker")  # [python, -m, odradek.cli, broker, ...]
        return [args[0], "-c", PROFILED_BROKER, str(out_dir / f"{self.name}.prof")] + args[at + 1:]

    cluster.ManagedProcess.argv = argv


def throughput_profile(args, work: Path) -> None:
    data = work / "records.txt"
    write_records(data, args.records, SIZE)
    profile_brokers(work)
    target = Target("RF=3", work / "cluster", 3)
    try:
        target.create_topic("prof", args.partitions)
        r = kcat_produce(target, "prof", data, args.records, args.partitions, args.acks)
        print(f"acks={args.acks}: {r.rps:,.0f} rec/s under cProfile", flush=True)
    finally:
        del target.admin
        # the last broker's controlled shutdown has nowhere to move leaderships: give it time
        target.cluster.stop(timeout=60)
    for prof in sorted(work.glob("*.prof")):
        print(f"\n=== {prof.stem} ===")
        stats = pstats.Stats(str(prof)).strip_dirs().sort_stats(args.sort)
        stats.print_stats(args.top)
        if args.callers:
            stats.print_callers(args.callers)


def frame_name(frame: str) -> str:
    """`func (path/to/module.py:line)` → `module.func`."""
    func, _, where = frame.partition(" (")
    module = where.rsplit("/", 1)[-1].split(".py", 1)[0]
    return f"{module}.{func}"


SHARES = [
    # (what, function-name fragments): a sample counts for the first rule met from its leaf up
    ("produce: answer encoded", ("encode_produce_response",)),
    ("leader: fetch answer encoded", ("encode_fetch_response", "_encode_fetch", "group_by_topic")),
    ("follower: request built and encoded", ("encode_fetch_request", "FetchSessionHandler", "fetch_session_handler")),
    ("follower: answer decoded", ("decode_fetch_response",)),
    ("follower: records appended", ("append_as_follower", "_checkpoint_new_epochs")),
    ("produce: batch checked and appended", ("append_as_leader", "validate", "check_batch", "message_bounds")),
    ("purgatory: acks=all wait", ("DelayedProduce", "produce_purgatory")),
    ("purgatory: fetch long poll and its wake-up", ("DelayedFetch", "DelayedOperation", "partition_changed",
                                                    "check_and_complete", "try_complete_else_watch")),
    ("leader: follower state, high watermark", ("_update_follower_fetch_state", "maybe_increment_high_watermark",
                                                "update_follower_fetch_state", "complete_delayed_requests")),
    ("leader: log read", ("read_from_local_log", "Log.read", "LocalLog.read")),
    ("leader: fetch session", ("new_context", "FetchContext", "FetchSession")),
    ("request decode and dispatch", ("decode_request", "KafkaApis.handle", "peek_api", "metered")),
    ("follower: fetch loop, other", ("ReplicaFetcher",)),
    ("produce: other", ("handle_produce", "append_records")),
    ("leader: fetch, other", ("handle_fetch", "fetch_messages")),
    ("socket I/O and framing", ("socket_server", "framing", "client.", "selector_events", "pipeline.")),
]
"""Where a produce's CPU goes, by the innermost matching frame; the rest is the event loop."""


def share_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for what, fragments in SHARES:
            if any(f in frame for f in fragments):
                return what
    return "event loop (tasks, futures, callbacks, select) and other"


def summarize(raw_files: list[Path], top: int) -> None:
    """Own and inclusive samples per function from py-spy's collapsed stacks, over all brokers,
    and the shares of SHARES."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    shares: collections.Counter[str] = collections.Counter()
    samples = 0
    for path in raw_files:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = [frame_name(f) for f in stack.split(";")]
            samples += n
            own[frames[-1]] += n
            shares[share_of(frames)] += n
            for name in set(frames):
                total[name] += n
    print(f"\n{samples} samples holding the GIL over {len(raw_files)} brokers; shares:")
    for what, n in shares.most_common():
        print(f"{100 * n / max(1, samples):6.1f}%  {what}")
    for title, counter in (("own time", own), ("including callees", total)):
        print(f"\n--- top {top} by {title} ---")
        for name, n in counter.most_common(top):
            print(f"{100 * n / max(1, samples):6.1f}%  {name}")


def rate_profile(args, work: Path) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not args.cprofile and not Path(py_spy).exists():
        raise SystemExit("py-spy not found: .venv/bin/pip install py-spy")
    if args.cprofile:
        profile_brokers(work)
    target = Target("RF=3", work / "cluster", 3)
    stopped = False
    try:
        target.create_topic("prof", args.partitions)
        outs = [work / f"broker-{i}.txt" for i in range(len(target.cluster.brokers))]
        spies = [] if args.cprofile else [
            subprocess.Popen([py_spy, "record", "--pid", str(b.popen.pid), "--rate", "200", "--gil",
                              "--duration", str(int(args.seconds)), "--format", "raw", "--output", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for b, out in zip(target.cluster.brokers, outs)]
        found: list = []
        with CpuMeter(target) as cpu:
            worker = threading.Thread(target=lambda: found.append(
                produce_latency(target.bootstrap, "prof", args.rate, args.seconds, acks=args.acks, size=SIZE)))
            worker.start()
            worker.join()
        for spy in spies:
            spy.wait(timeout=60)
        p50, p99, n = found[0]
        print(f"acks={args.acks} at {args.rate:,.0f} rec/s under {'cProfile' if args.cprofile else 'py-spy'}: "
              f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, brokers' CPU {cpu.brokers * 1e6 / n:,.0f} us/record "
              f"({cpu.brokers_sys * 1e6 / n:,.0f} of it in the kernel)")
        if not args.cprofile:
            summarize([o for o in outs if o.exists()], args.top)
            return
        del target.admin
        target.cluster.stop(timeout=60)
        stopped = True
        stats = pstats.Stats(*[str(p) for p in sorted(work.glob("*.prof"))]).strip_dirs().sort_stats(args.sort)
        print(f"\n=== all brokers, per record: divide counts and times by {n} ===")
        stats.print_stats(args.top)
        if args.callers:
            stats.print_callers(args.callers)
    finally:
        if not stopped:
            del target.admin
            target.cluster.stop(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--top", type=int, default=25, help="functions printed per broker (--rate: in all)")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative)")
    parser.add_argument("--callers", default=None, help="also print who calls functions matching this")
    parser.add_argument("--rate", type=float, default=None, help="py-spy at this many records/s, linger.ms=0")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the --rate run")
    parser.add_argument("--cprofile", action="store_true",
                        help="--rate: the brokers under cProfile (call counts) instead of py-spy")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (the stats files)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="odradek-bench-prof-"))
    try:
        if args.rate:
            rate_profile(args, work)
        else:
            throughput_profile(args, work)
    finally:
        if args.keep:
            print("work folder kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
