"""Types of the log cleaner's C loops (broker/log/_cleaner.c), which mypy cannot read."""

from collections.abc import Callable

from _typeshed import ReadableBuffer, WriteableBuffer

def map_keys(buffer: ReadableBuffer, count: int, base_offset: int, first_dirty: int, offsets: dict[bytes, int],
             digest: Callable[[bytes], bytes], latest: WriteableBuffer = ..., latest_base: int = ...,
             /) -> None:
    """offsets[map key] = offset for each keyed record at or past `first_dirty`, and in `latest`
    each mapped offset's bit set and the replaced one's cleared; ValueError when the records do
    not parse."""

def filter_records(buffer: ReadableBuffer, count: int, base_offset: int, offsets: dict[bytes, int], map_end: int,
                   retain_deletes: bool, digest: Callable[[bytes], bytes], /) -> tuple[int, bytes | None]:
    """(records kept, None when all are, else the kept records' bytes); ValueError when the records
    do not parse."""

def count_latest(latest: ReadableBuffer, start: int, end: int, /) -> int:
    """The number of set bits in [start, end) of `latest`."""
