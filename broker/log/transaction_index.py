"""The aborted-transaction index of one segment (Kafka's TransactionIndex, `<base>.txnindex`).

One entry per transaction aborted by a marker in this segment, in marker order, in Kafka's
layout (34 bytes: version 0, producer id, first offset, last offset = the marker's, and the last
stable offset right after the abort). A read_committed Fetch returns the entries overlapping its
range so the consumer can drop those producers' records. The file is only created once a segment
has an aborted transaction; it is rebuilt from the log whenever producer state is replayed
(recovery), so a torn tail is simply cut off.
"""

import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    """The offset of the ABORT marker."""
    last_stable_offset: int
    """The partition's LSO once this abort completed: when it passes a fetch's upper bound, no
    older transaction can still overlap that fetch (the search can stop)."""


class TransactionIndex:
    def __init__(self, path: Path):
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        """Read on first use: most segments have no file, and a start-up opens thousands."""

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = []
            self._load()
        return self._entries

    @entries.setter
    def entries(self, entries: list[AbortedTxn]) -> None:
        self._entries = entries

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        entries: list[AbortedTxn] = []
        for pos in range(0, whole, ENTRY_SIZE):
            version, *fields = ENTRY.unpack_from(data, pos)
            if version != VERSION or (entries and fields[2] < entries[-1].last_offset):
                whole = pos
                break
            entries.append(AbortedTxn(*fields))
        if whole != len(data):
            log.warning("%s: cutting %d bytes of a torn or foreign tail", self.path, len(data) - whole)
            self._rewrite(entries)
        self.entries = entries

    @property
    def last_offset(self) -> int:
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> None:
        """Add an abort; markers come in offset order, so a lower one means a replay gone wrong."""
        if txn.last_offset <= self.last_offset:
            raise ValueError(f"{self.path}: abort at {txn.last_offset} is not after {self.last_offset}")
        with open(self.path, "ab") as f:
            f.write(ENTRY.pack(VERSION, *txn))
        self.entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the aborts whose marker is at or above `offset`."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self._rewrite(keep)
            self.entries = keep

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(ENTRY.pack(VERSION, *t) for t in entries))
        os.replace(tmp, self.path)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborts overlapping [fetch_offset, upper_bound), and whether the search may stop here
        (Kafka's TxnIndexSearchResult: an abort whose LSO is past the bound)."""
        out = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def fsync(self) -> None:
        if self._entries:  # never read: nothing appended by this process either
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, target: Path) -> None:
        try:
            self.path.rename(target)
        except FileNotFoundError:
            pass
        self.path = target

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
