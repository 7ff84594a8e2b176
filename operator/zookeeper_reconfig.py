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

import base64
import hashlib
from dataclasses import dataclass

SUPER_USER = "super"


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


def super_digest(password: str) -> str:
    """`super:<base64 sha1(super:password)>`: what ZooKeeper's
    `zookeeper.DigestAuthenticationProvider.superDigest` takes (the server never sees the password)."""
    digest = hashlib.sha1(f"{SUPER_USER}:{password}".encode()).digest()  # ZooKeeper's digest scheme
    return f"{SUPER_USER}:{base64.b64encode(digest).decode()}"


def parse_conf(text: bytes | str) -> dict[int, str] | None:
    """The member list in a `conf` four-letter answer (after its `membership:` line); None when
    it has none (a member that is not running a quorum)."""
    body = text.decode(errors="replace") if isinstance(text, bytes) else text
    _, found, membership = body.partition("membership:")
    members = parse_config(membership)[0] if found else {}
    return members or None


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


SCALING = "ZooKeeperScaling"
HELD = "ZooKeeperMemberDown"
REFUSED = "ZooKeeperScalingRefused"
MIN_SCALABLE = 3
"""The smallest ensemble the operator scales from or to: one or two voters have no member to
spare, so every step through them stops the ensemble at the first failure (and a lone member's
leader election cannot take a learner in reliably); such an ensemble keeps its size."""


@dataclass(frozen=True)
class Ensemble:
    """What a pass observed of a managed ensemble."""
    desired: int
    """spec.zookeeper.replicas"""
    replicas: int
    """The StatefulSet's spec.replicas (pods 0..replicas-1 are members replicas..1 by id)."""
    members: dict[int, str] | None
    """/zookeeper/config (after a sync) as parse_config gives it; None: the ensemble did not answer."""
    serving: frozenset[int] = frozenset()
    """Member ids whose `srvr` names a mode: in sync with a leader and serving."""


@dataclass(frozen=True)
class Decision:
    replicas: int
    """The StatefulSet's replica count to render this pass."""
    reconfig: Step | None = None
    """The reconfiguration to run this pass (after the render)."""
    progress: tuple[str, str] | None = None
    """(reason, message) while a scale is under way or held."""
    refused: tuple[str, str] | None = None
    """(reason, message) of a scale the operator will not make."""


def settled_size(members: dict[int, str] | None) -> int | None:
    """k when the committed voters are exactly 1..k (what the operator's steps leave); None when
    unknown or changed outside the operator. The reconciler records it on the StatefulSet."""
    if members is None:
        return None
    current = voters(members)
    return len(current) if current and current == list(range(1, len(current) + 1)) else None


def decide(e: Ensemble) -> Decision:
    """The next step of a scale, from what is observed now (never from memory, so a restarted
    operator resumes): one StatefulSet replica or one reconfig per pass.

    Up (k voters 1..k, desired > k): start member k+1 (replicas k+1); once it serves (synced as a
    non-voting learner) add it by reconfig; the next pass sees k+1 voters. Down: remove member k
    by reconfig while 1..k all serve, then shrink the StatefulSet to the k-1 voters. Pods without
    a vote (a step cut short) are stopped before anything else; a voter down holds every step."""
    if e.members is None:
        if e.replicas == e.desired:
            return Decision(e.replicas)
        return Decision(e.replicas, progress=(SCALING, f"{e.replicas} → {e.desired} members: waiting for the "
                                                       "ensemble to answer (its configuration decides the step)"))
    current = voters(e.members)
    k = len(current)
    if current != list(range(1, k + 1)):
        return Decision(e.replicas, refused=(REFUSED, f"the ensemble's voting members are {current}, not 1..{k} "
                                                      "(changed outside the operator): no step is safe to derive"))
    if e.desired == k:
        if e.replicas == k:
            return Decision(k)
        return Decision(k, progress=(SCALING, f"the StatefulSet follows the ensemble's {k} voting members "
                                              f"({e.replicas} pods → {k})"))
    if k < MIN_SCALABLE or e.desired < MIN_SCALABLE:
        return Decision(e.replicas, refused=(REFUSED, (
            f"zookeeper.replicas {k} → {e.desired}: an ensemble of fewer than {MIN_SCALABLE} members has none to "
            f"spare, so a scale through one would stop at the first failure; it stays at {k}")))
    plan = f"{k} → {e.desired} members"
    if e.replicas > k + (e.desired > k):
        return Decision(k + (e.desired > k), progress=(SCALING, f"{plan}: stopping pods without a vote"))
    down = [i for i in current if i not in e.serving]
    if e.replicas < k:
        return Decision(k, progress=(SCALING, f"{plan}: starting the pods of voting members {down}"))
    if down:
        return Decision(e.replicas, progress=(HELD, f"{plan} held: voting members {down} are not serving; "
                                                    "no member is added or removed until every one is"))
    if e.desired > k:
        new = k + 1
        if e.replicas == k:
            return Decision(new, progress=(SCALING, f"{plan}: starting member {new}"))
        if new in e.serving:
            return Decision(new, reconfig=Step(add=new), progress=(SCALING, f"{plan}: adding member {new}"))
        return Decision(new, progress=(SCALING, f"{plan}: waiting for member {new} to sync"))
    return Decision(k, reconfig=Step(remove=k), progress=(SCALING, f"{plan}: removing member {k}"))
