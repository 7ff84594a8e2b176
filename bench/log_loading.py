"""Log loading at a broker's start (issue 31): LogManager.startup over N logs on disk.

Writes `--partitions` logs into one log directory as a broker at scale holds them (each a few
acks=all batches from an idempotent producer under `--epochs` leader epochs, in `--segments`
segments, then closed as a controlled shutdown closes it: indexes, producer snapshot and
leader-epoch checkpoint written; the last epoch begun at the log end, with nothing appended
since, as after a leadership moved), then times `LogManager.startup` in a fresh child process,
`--repeat` times, alternately after a clean shutdown (the marker present: no recovery) and after a
crash (the marker removed: every segment after the recovery point is checked). Prints logs loaded
per second for each, medians over the repeats.

`--profile DIR` runs each load under py-spy (collapsed stacks into DIR, `clean.txt` and `crash.txt`).

`--baseline PYTHONPATH` loads each copy with other code too (a checkout of an older commit, with
its C extensions built), alternating, for a before/after in the same minutes.

Run: .venv/bin/python bench/log_loading.py [--partitions 9000] [--repeat 3] [--baseline DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from odradek.broker.log import LogConfig, LogManager
from odradek.broker.log.log_manager import CLEAN_SHUTDOWN_FILE
from odradek.broker.log.record_batch import build_batch
from odradek.common.config import BrokerConfig


def broker_config() -> BrokerConfig:
    return BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"})


def write_logs(log_dir: Path, partitions: int, per_topic: int, batches: int, segments: int, epochs: int) -> None:
    manager = LogManager([log_dir], broker_config())
    manager.startup()
    config = LogConfig()
    now = int(time.time() * 1000)
    for p in range(partitions):
        lg = manager.get_or_create_log(f"t{p // per_topic:05d}", p % per_topic, config)
        seq = 0
        for s in range(segments):
            if s:
                lg.roll()
            for b in range(batches):
                epoch = (s * batches + b) * epochs // (segments * batches)
                lg.leader_epoch_cache.assign(epoch, lg.log_end_offset)
                data = build_batch([b"x" * 100] * 4, base_timestamp=now, producer_id=1000 + p, producer_epoch=0,
                                   base_sequence=seq)
                seq += 4
                lg.append_as_leader(data, leader_epoch=epoch)
        lg.high_watermark = lg.log_end_offset
        # then a leadership moved and nothing was appended since (a controlled shutdown's moves):
        # loading drops that entry, as Kafka's truncateFromEnd does
        lg.leader_epoch_cache.assign(epochs, lg.log_end_offset)
    manager.shutdown()


def load_once(log_dir: Path) -> float:
    """In this process: the seconds LogManager.startup takes."""
    manager = LogManager([log_dir], broker_config())
    start = time.perf_counter()
    manager.startup()
    took = time.perf_counter() - start
    manager.shutdown()
    return took


def run_child(log_dir: Path, crash: bool, profile: Path | None, pythonpath: str | None) -> float:
    """Load `log_dir` in a fresh process (with `pythonpath` first on its path: other code)."""
    if crash:
        (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--load-only", str(log_dir)]
    if profile is not None:
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        profile.mkdir(parents=True, exist_ok=True)
        out = profile / ("crash.txt" if crash else "clean.txt")
        cmd = [binary, "record", "--rate", "250", "--format", "raw", "--output", str(out), "--", *cmd]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800, env=env)
    return float(next(line for line in done.stdout.splitlines() if line.startswith("loaded in "))[10:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--partitions", type=int, default=9000)
    p.add_argument("--per-topic", type=int, default=100)
    p.add_argument("--batches", type=int, default=3, help="batches per segment")
    p.add_argument("--segments", type=int, default=1, help="segments per log")
    p.add_argument("--epochs", type=int, default=2, help="leader epochs per log")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--baseline", default=None, metavar="PYTHONPATH",
                   help="also load each copy with the code found there (a checkout of another commit), "
                        "alternating with this code")
    p.add_argument("--profile", default=None, metavar="DIR")
    p.add_argument("--work-dir", default=None, help="use (and keep) this directory")
    p.add_argument("--json", action="store_true")
    p.add_argument("--load-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.load_only:
        print(f"loaded in {load_once(Path(args.load_only))}")
        return 0
    with tempfile.TemporaryDirectory(prefix="odradek-loading-") as scratch:
        template = Path(args.work_dir or scratch) / "logs"
        started = time.perf_counter()
        write_logs(template, args.partitions, args.per_topic, args.batches, args.segments, args.epochs)
        print(f"wrote {args.partitions} logs in {time.perf_counter() - started:.1f} s", flush=True)
        profile = Path(args.profile) if args.profile else None
        codes: dict[str, str | None] = {"this": None}
        if args.baseline:
            codes = {"baseline": args.baseline, **codes}
        times: dict[str, list[float]] = {}
        copy = template.with_name("copy")
        for i in range(args.repeat):
            for kind in ("clean", "crash"):
                for code, pythonpath in codes.items():
                    # every load starts from the same files: a load may rewrite some of them
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(template, copy)
                    took = run_child(copy, kind == "crash", profile if i == 0 and code == "this" else None,
                                     pythonpath)
                    times.setdefault(f"{code} {kind}", []).append(took)
                    print(f"{code} {kind} {i}: {took:.2f} s, {args.partitions / took:,.0f} logs/s", flush=True)
        figures = {name: {"median_s": round(statistics.median(ts), 3),
                          "logs_per_s": round(args.partitions / statistics.median(ts))} for name, ts in times.items()}
        print(json.dumps(figures) if args.json else figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
