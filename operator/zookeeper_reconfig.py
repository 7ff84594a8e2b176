"""Scaling a ZooKeeper ensemble one member at a time by dynamic reconfiguration (ZooKeeper 3.5+
`reconfig`), as plain data.

The ensemble's membership lives in ZooKeeper itself (`/zookeeper/config`: `server.N=...` lines and
a `version=`), not in a file the operator renders, so a member started later reads the current
list. A step adds or removes exactly one voting member:

- Up: member n+1 is started first with the current members plus itself in its dynamic config; it
  syncs as a non-voting learner; once it serves, `reconfig` adds it as a participant. The new
  configuration commits only with a quorum of both the old and the new one, and the new member is
  already in sync, so a quorum stands at every step.
- Down: the highest member is removed by `reconfig` first (the remaining ones commit it), and
  only then is its process stopped; the quorum shrinks with the ensemble.

Reconfig needs `reconfigEnabled=true`, a `dynamicConfigFile` on a writable volume (ZooKeeper
rewrites it) and an authorised client (a super user, ZOOKEEPER-2014).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    id: int
    host: str
    quorum_port: int
    election_port: int
    client_port: int
    client_host: str = "0.0.0.0"
    role: str = "participant"

    def line(self) -> str:
        """`server.N=host:quorum:election:role;clientHost:clientPort`, ZooKeeper's dynamic syntax."""
        return (f"server.{self.id}={self.host}:{self.quorum_port}:{self.election_port}:{self.role};"
                f"{self.client_host}:{self.client_port}")


def parse_config(data: bytes | str) -> tuple[dict[int, str], int | None]:
    """`/zookeeper/config` → (id → its server line's value, config version)."""
    text = data.decode() if isinstance(data, bytes) else data
    members: dict[int, str] = {}
    version = None
    for raw in text.splitlines():
        key, _, value = raw.strip().partition("=")
        if key.startswith("server."):
            try:
                members[int(key.removeprefix("server."))] = value
            except ValueError:
                continue
        elif key == "version":
            try:
                version = int(value, 16)
            except ValueError:
                version = None
    return members, version


def voters(members: dict[int, str]) -> list[int]:
    """Ids of the voting members (participants; observers do not count towards a quorum)."""
    return sorted(i for i, v in members.items() if ":observer" not in v.split(";")[0])


@dataclass(frozen=True)
class Step:
    add: int | None = None
    """Member id to add by reconfig once its process serves (start it first)."""
    remove: int | None = None
    """Member id to remove by reconfig; stop its process only after the reconfig committed."""


def next_step(members: dict[int, str], desired: int) -> Step | None:
    """One member at a time towards `desired` voters with ids 1..desired (StatefulSet ordinal + 1);
    None when the ensemble has them. Members outside 1..desired leave highest first."""
    if desired < 1:
        raise ValueError("an ensemble needs at least one member")
    current = voters(members)
    extra = [i for i in current if i > desired]
    if extra:
        return Step(remove=max(extra))
    missing = [i for i in range(1, desired + 1) if i not in current]
    if missing:
        return Step(add=min(missing))
    return None


def quorum(n: int) -> int:
    return n // 2 + 1
