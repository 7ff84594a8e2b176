"""Where an RF=3 acks=all produce spends its time: the replication benchmark's kcat run against a
3-broker cluster whose brokers run under cProfile, then each broker's top functions.

cProfile slows Python code about twofold, so the throughput printed here is not comparable with
bench/replication.py; read the shares. Run: .venv/bin/python bench/profile_replication.py
"""

import argparse
import pstats
import shutil
import sys
import tempfile
from pathlib import Path

from replication import Target, kcat_produce  # bench/ is sys.path[0] when run as a script
from throughput import write_records

SIZE = 100


def profile_brokers(out_dir: Path):
    """Makes LocalCluster start `odradek broker` under cProfile, one stats file per broker."""
    from odradek.dev import cluster

    plain_argv = cluster.ManagedProcess.argv

    def argv(self):
        args = plain_argv(self)
        if self.role != "broker":
            return args
        return [args[0], "-m", "cProfile", "-o", str(out_dir / f"{self.name}.prof")] + args[1:]

    cluster.ManagedProcess.argv = argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--top", type=int, default=25, help="functions printed per broker")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative)")
    parser.add_argument("--callers", default=None, help="also print who calls functions matching this")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="odradek-bench-prof-"))
    try:
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
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
