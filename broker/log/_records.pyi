"""Types of the C record walker (broker/log/_records.c), which mypy cannot read."""

from _typeshed import ReadableBuffer

def walk_records(buffer: ReadableBuffer, start: int, end: int, count: int, require_key: bool = False,
                 /) -> tuple[int, str] | list[int] | None:
    """None when the `count` records in `buffer[start:end]` are well formed; else the first bad
    record's (index, message), or, with `require_key`, the list of keyless records' indexes."""
