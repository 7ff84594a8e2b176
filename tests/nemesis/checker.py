"""What must hold after a nemesis run, as pure functions over what the run recorded.

- Every acknowledged record is in the log, at the offset it was acknowledged with; with
  idempotence exactly once, without at least once. librdkafka acknowledges some records without
  an offset (offset < 0): those of a request whose answer was lost (a timeout, a dropped
  connection) once a later request of the same idempotent producer succeeds (its "implicit ack"),
  and those of a retry answered DUPLICATE_SEQUENCE_NUMBER. Such a record must be in its
  acknowledged partition, at any offset.
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
    lost_detail: list[str] = field(default_factory=list)
    """Where each lost id was acknowledged and where it is stored, for the report."""
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
    verdict.lost = sorted(i for i, pos in acked.items() if not stored_as_acked(pos, positions.get(i, [])))
    verdict.lost_detail = [f"{i} acked at {acked[i]}, stored at {positions.get(i, [])}" for i in verdict.lost]
    verdict.duplicates = sorted(i for i in acked if len(positions.get(i, ())) > 1)
    for p, ids in sorted(first_acked_order.items()):
        for before, after in pairwise(ids):
            if after < before:
                verdict.out_of_order.append(f"{stream.topic}-{p}: {after} after {before}")
                break
    return verdict


def stored_as_acked(acked: tuple[int, int], stored: list[tuple[int, int]]) -> bool:
    """Whether a record acknowledged at `acked` (partition, offset) is among its `stored`
    positions; an offset < 0 (acknowledged without one) matches any offset of that partition."""
    partition, offset = acked
    if offset < 0:
        return any(p == partition for p, _ in stored)
    return acked in stored


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
