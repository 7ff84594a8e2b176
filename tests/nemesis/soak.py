"""`make nemesis`: randomised nemesis runs until DURATION is spent, then a table of them.

    .venv/bin/python tests/nemesis/soak.py --duration 30m [--seed N] [--runs N] [--keep]
        [--scenario restart-registered] [--client-debug]

Each run gets seed `base + i` and its own fresh cluster; a failing run prints its seed and its
fault schedule (and keeps its data directory); the exit code is 1 when any run failed. With
`--scenario`, every run plays that fixed scenario (its timing and targets drawn from the seed)
instead of random faults.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: `nemesis` and `safety` packages

from nemesis.runner import (
    RESTART_REGISTERED,
    SCENARIOS,
    RunResult,
    random_schedule,
    restart_registered_schedule,
    run_once,
)


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 1h)")
    return float(m.group(1)) * {"": 60, "s": 1, "m": 60, "h": 3600}[m.group(2)]


SHORT = {"partition": "part", "zookeeper": "zk", "controller": "ctl", "broker": "brk", "leader": "ldr",
         "follower": "flw", "all-but-clients": "all", "brokers": "brks"}


def short(kind: str) -> str:
    return "-".join(SHORT.get(w, w) for w in kind.replace("all-but-clients", "all").split("-"))


def row(r: RunResult) -> str:
    kinds = ",".join(short(s.kind) for s in r.schedule)
    return (f"{r.run:>3}  {r.seed:>10}  {len(r.applied)}/{len(r.schedule)} {kinds[:60]:<60}  {r.acknowledged:>9}  "
            f"{r.lost:>4}  {r.duplicates:>4}  {r.duplicates_plain:>5}  {r.expired:>7}  "
            f"{'-' if r.heal_s is None else f'{r.heal_s:.1f}':>6}  {r.elapsed_s:>6.0f}  {'ok' if r.ok else 'FAILED'}")


HEADER = (f"run  {'seed':>10}  faults (applied/scheduled, kinds){'':<28}  {'acked':>9}  lost  dups  "
          f"dups*  expired  heal s  time s  result")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nemesis soak", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=parse_duration, default=parse_duration("30m"))
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: from the clock)")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second per producer")
    parser.add_argument("--keep", action="store_true", help="keep every run's data directory")
    parser.add_argument("--runs", type=int, default=None, help="stop after this many runs (and within --duration)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default=None,
                        help="play this fixed scenario in every run instead of random faults")
    parser.add_argument("--client-debug", action="store_true",
                        help="librdkafka debug logs (broker,topic,msg,eos) into each run's directory")
    args = parser.parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # the checker's own client: reconnects are expected
    base = args.seed if args.seed is not None else int(time.time()) % 1_000_000_000
    root = Path(tempfile.mkdtemp(prefix="odradek-nemesis-"))
    deadline = time.monotonic() + args.duration
    results: list[RunResult] = []
    longest = 0.0
    print(f"nemesis soak: {args.duration:.0f}s, base seed {base}, data in {root}", flush=True)
    print(HEADER, flush=True)
    run = 0
    while (run == 0 or time.monotonic() + longest < deadline) and (args.runs is None or run < args.runs):
        seed = base + run
        rng = random.Random(seed)
        workdir = root / f"run-{run}"
        if args.scenario == RESTART_REGISTERED:
            schedule = restart_registered_schedule(rng)
            result = run_once(run, seed, schedule, workdir, rate=args.rate, client_debug=args.client_debug,
                              **SCENARIOS[args.scenario])
        else:
            schedule = random_schedule(rng, faults=rng.randint(2, 5), span_s=rng.uniform(30, 75))
            result = run_once(run, seed, schedule, workdir, rate=args.rate, client_debug=args.client_debug)
        results.append(result)
        longest = max(longest, result.elapsed_s)
        print(row(result), flush=True)
        if not result.ok:
            print(result.report(), flush=True)
            print(f"  data kept in {workdir}", flush=True)
        elif not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        run += 1
    print()
    print(HEADER)
    for r in results:
        print(row(r))
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results)} runs, {sum(r.acknowledged for r in results)} acknowledged, "
          f"{sum(r.lost for r in results)} lost, {sum(r.expired for r in results)} expired, "
          f"{sum(r.duplicates for r in results)} duplicated with "
          f"idempotence ({sum(r.duplicates_plain for r in results)} without, allowed; "
          f"{sum(r.reordered_plain for r in results)} partitions reordered without, allowed), "
          f"{len(failed)} failed" + (f": seeds {[r.seed for r in failed]}" if failed else ""))
    refused = [(r.seed, s) for r in results for s in r.refused_starts]
    print(f"{len(refused)} broker start-ups refused while a fault kept ZooKeeper away (restarted, not crashes)"
          + (f": {refused[:5]}" if refused else ""))
    print("dups: acknowledged records stored twice by the idempotent producer; dups*: by the other one")
    if not failed and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
