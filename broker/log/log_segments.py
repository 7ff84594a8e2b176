"""LogSegments: one log's segments in offset order (Kafka's LogSegments).

The segments and their base offsets side by side, so that finding the segment of an offset is a
bisection. Plain data: it opens, writes and deletes no file (LocalLog does).
"""

import bisect
from collections.abc import Iterator, Sequence

from .segment import LogSegment


class LogSegments:
    __slots__ = ("_bases", "_segments")

    def __init__(self, segments: Sequence[LogSegment] = ()):
        self._segments: list[LogSegment] = list(segments)
        self._bases: list[int] = [s.base_offset for s in self._segments]

    # --- lookups --------------------------------------------------------------------------

    def values(self) -> Sequence[LogSegment]:
        """Every segment, oldest first (the list itself: callers only read it)."""
        return self._segments

    def base_offsets(self) -> Sequence[int]:
        return self._bases

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        """The last segment, the one appends go to."""
        return self._segments[-1]

    @property
    def first_segment(self) -> LogSegment:
        return self._segments[0]

    def floor_index(self, offset: int) -> int:
        """Index of the segment holding `offset`: the last whose base offset is <= it (the
        first segment for an offset below every base)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def floor_segment(self, offset: int) -> LogSegment:
        return self._segments[self.floor_index(offset)]

    def index_of_base(self, base_offset: int) -> int:
        """Index of the first segment whose base offset is >= `base_offset`."""
        return bisect.bisect_left(self._bases, base_offset)

    def next_base_offset(self, i: int) -> int | None:
        """The base offset of the segment after the `i`-th one; None after the active one."""
        return self._bases[i + 1] if i + 1 < len(self._bases) else None

    def values_between(self, start: int, end: int) -> Sequence[LogSegment]:
        """The segments holding offsets of [start, end) (at least the one holding `start`)."""
        i = self.floor_index(start)
        j = bisect.bisect_left(self._bases, end)
        return self._segments[i:max(j, i + 1)]

    def values_from(self, offset: int) -> Sequence[LogSegment]:
        """The segment holding `offset` and every later one."""
        return self._segments[self.floor_index(offset):]

    def size_in_bytes(self) -> int:
        return sum(seg.size for seg in self._segments)

    # --- changes --------------------------------------------------------------------------

    def add(self, segment: LogSegment) -> None:
        """Append a segment after the last one (its base offset is the highest)."""
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def pop_last(self) -> LogSegment:
        self._bases.pop()
        return self._segments.pop()

    def remove_first(self, count: int) -> None:
        del self._segments[:count]
        del self._bases[:count]

    def remove_after(self, i: int) -> list[LogSegment]:
        """Forget every segment after the `i`-th one; returns them."""
        removed = self._segments[i + 1:]
        del self._segments[i + 1:]
        del self._bases[i + 1:]
        return removed

    def replace(self, i: int, j: int, segment: LogSegment) -> None:
        """Segments [i, j) become the one `segment` (a cleaned segment swapped in)."""
        self._segments[i:j] = [segment]
        self._bases[i:j] = [segment.base_offset]

    def reset(self, segment: LogSegment) -> None:
        """Forget every segment; `segment` is the only one."""
        self._segments = [segment]
        self._bases = [segment.base_offset]
