"""What must hold after a nemesis run, as pure functions over what the run recorded.

- Every acknowledged record is in the log, at the offset it was acknowledged with; with
  idempotence exactly once, without at least once.
- Per partition, the acknowledged records of the idempotent producer appear in the order they were
  sent. Without idempotence the order is the client's to keep, and librdkafka does not keep it
  across leader changes even with one request in flight (its limit is per connection, and it
  re-batches retried records: the nemesis saw a batch of one new record stored right before the
  retry of the 164 older ones it had queued), so that is reported, not failed.
- No record a reader was served changes later (a consumer reads below the high watermark: what it
  saw is committed, so it is in every replica that can become leader).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

from .workload import Stream

Log = dict[tuple[str, int], list[tuple[int, bytes | None]]]


@dataclass
class StreamVerdict:
    topic: str
    idempotent: bool
    acknowledged: int
    lost: list[int] = field(default_factory=list)
    """Acknowledged ids not found at their acknowledged partition and offset."""
    duplicates: list[int] = field(default_factory=list)
    """Acknowledged ids stored more than once."""
    out_of_order: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.lost and not (self.idempotent and (self.duplicates or self.out_of_order))


def check_stream(stream: Stream, acked: dict[int, tuple[int, int]], log: Log) -> StreamVerdict:
    positions: dict[int, list[tuple[int, int]]] = defaultdict(list)
    first_acked_order: dict[int, list[int]] = defaultdict(list)
    for p in range(stream.partitions):
        seen_here: set[int] = set()
        for offset, value in log.get((stream.topic, p), []):
            record_id = stream.parse(value)
            if record_id is None:
                continue
            positions[record_id].append((p, offset))
            if record_id in acked and record_id not in seen_here:
                seen_here.add(record_id)
                first_acked_order[p].append(record_id)
    verdict = StreamVerdict(stream.topic, stream.idempotent, len(acked))
    verdict.lost = sorted(i for i, pos in acked.items() if pos not in positions.get(i, ()))
    verdict.duplicates = sorted(i for i in acked if len(positions.get(i, ())) > 1)
    for p, ids in sorted(first_acked_order.items()):
        for before, after in pairwise(ids):
            if after < before:
                verdict.out_of_order.append(f"{stream.topic}-{p}: {after} after {before}")
                break
    return verdict


def changed_reads(seen: dict[tuple[str, int, int], bytes | None], log: Log) -> list[str]:
    """Records a reader was served whose offset now holds something else, or nothing."""
    final = {(t, p): dict(records) for (t, p), records in log.items()}
    out = []
    for (t, p, offset), value in sorted(seen.items()):
        now = final.get((t, p), {})
        if offset not in now:
            out.append(f"{t}-{p}@{offset}: read {value!r}, now gone")
        elif now[offset] != value:
            out.append(f"{t}-{p}@{offset}: read {value!r}, now {now[offset]!r}")
    return out
