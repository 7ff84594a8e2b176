"""Balanced, rack-aware replica placement that moves as little as it can: pure functions over
assignments.

Used by `odradek reassign --generate` and by the operator when brokers are added or drained, and
for an on-demand rebalance. Per topic, replicas on brokers that are not allowed move to the least
loaded allowed broker; then replicas that share a rack with too many of their partition's others
move to another rack; then replicas move one at a time from the most to the least loaded broker
until no two brokers differ by more than one replica; a moved replica takes the slot of the one it
replaces. Then the preferred leaders (first replicas) are spread, by reordering only.

Racks (`broker.rack`, Kafka's rack-aware assignment): when every allowed broker has one, no rack
holds more than ceil(replicas / racks) replicas of a partition, so while there are at least as
many racks as replicas, no two replicas of a partition share a rack. Without racks (or when some
broker has none) every broker counts as its own rack. Ties are broken by the cluster-wide load
(`cluster_load`), so balancing topic by topic also evens the brokers' totals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from math import ceil

Assignment = dict[int, tuple[int, ...]]
"""partition → replicas (the first is the preferred leader)."""
Racks = Mapping[int, str]
"""broker → its broker.rack."""


class BalanceError(ValueError):
    """The assignment cannot be placed on these brokers (names the topic)."""


def effective_racks(brokers: Iterable[int], racks: Racks | None) -> dict[int, str]:
    """Each broker's rack for placement: `racks` when every broker has a non-empty one, else each
    broker its own rack (Kafka refuses a partly racked cluster; here it is placed rack-unaware)."""
    allowed = sorted(set(brokers))
    if racks and all(racks.get(b) for b in allowed):
        return {b: str(racks[b]) for b in allowed}
    return {b: f"\0{b}" for b in allowed}


def rack_violations(assignment: Mapping[int, Iterable[int]], brokers: Iterable[int],
                    racks: Racks | None) -> list[int]:
    """Partitions with more replicas in one rack than ceil(replicas / racks) allows."""
    rack_of = effective_racks(brokers, racks)
    n = len(set(rack_of.values()))
    out = []
    for p, replicas in sorted(assignment.items()):
        r = list(replicas)
        counts: dict[str, int] = {}
        for b in r:
            rack = rack_of.get(b, f"\0{b}")
            counts[rack] = counts.get(rack, 0) + 1
        if counts and max(counts.values()) > ceil(len(r) / max(1, n)):
            out.append(p)
    return out


class _Topic:
    """One topic's placement state: replicas, per-broker load, rack caps."""

    def __init__(self, parts: dict[int, list[int]], allowed: list[int], rack_of: dict[int, str],
                 cluster_load: dict[int, int]):
        self.parts, self.allowed, self.rack_of, self.glob = parts, allowed, rack_of, cluster_load
        self.racks = len(set(rack_of.values()))
        self.load = dict.fromkeys(allowed, 0)
        for replicas in parts.values():
            for b in replicas:
                if b in self.load:
                    self.load[b] += 1

    def low(self, b: int) -> tuple[int, int, int]:
        return self.load[b], self.glob.get(b, 0), b

    def high(self, b: int) -> tuple[int, int, int]:
        return self.load[b], self.glob.get(b, 0), -b

    def fits(self, replicas: list[int], leaving: int | None, b: int) -> bool:
        """Whether `b` may take `leaving`'s slot (or a new one) without overfilling its rack."""
        if b in replicas:
            return False
        cap = ceil(len(replicas if leaving is not None else [*replicas, b]) / self.racks)
        rack = self.rack_of[b]
        return sum(1 for x in replicas if x != leaving and self.rack_of.get(x) == rack) < cap

    def move(self, p: int, i: int, to: int) -> None:
        replicas = self.parts[p]
        old = replicas[i]
        if old in self.load:
            self.load[old] -= 1
            self.glob[old] = self.glob.get(old, 0) - 1
        replicas[i] = to
        self.load[to] += 1
        self.glob[to] = self.glob.get(to, 0) + 1

    def evacuate(self) -> None:
        """Replicas on brokers that are not allowed go to the least loaded allowed broker (in a
        rack with room when there is one)."""
        for p, replicas in self.parts.items():
            for i, b in enumerate(replicas):
                if b not in self.load:
                    free = [x for x in self.allowed if x not in replicas]
                    fitting = [x for x in free if self.fits(replicas, b, x)] or free
                    self.move(p, i, min(fitting, key=self.low))

    def spread_racks(self) -> None:
        """A replica in a rack over its cap moves to the least loaded broker of a rack with room."""
        for p, replicas in self.parts.items():
            for _ in range(len(replicas)):
                cap = ceil(len(replicas) / self.racks)
                counts: dict[str, int] = {}
                for b in replicas:
                    counts[self.rack_of[b]] = counts.get(self.rack_of[b], 0) + 1
                over = [i for i, b in enumerate(replicas) if counts[self.rack_of[b]] > cap]
                if not over:
                    break
                i = max(over, key=lambda j: (j > 0, self.high(replicas[j])))  # keep the leader if it can
                fitting = [x for x in self.allowed if self.fits(replicas, replicas[i], x)]
                if not fitting:
                    break
                self.move(p, i, min(fitting, key=self.low))

    def level(self) -> None:
        """A replica of a more loaded broker moves to a less loaded one (by at least two) in a
        partition that lacks it and where its rack has room. Each move lowers the sum of squared
        loads, so this ends; only excess replicas move."""
        for _ in range(sum(len(r) for r in self.parts.values()) * len(self.allowed) + 1):
            if not self._one_move(lambda hi, lo: self.load[hi] - self.load[lo] > 1):
                return

    def level_cluster(self) -> None:
        """Moves that even the brokers' totals while keeping this topic within one replica."""
        for _ in range(sum(len(r) for r in self.parts.values()) * len(self.allowed) + 1):
            if not self._one_move(lambda hi, lo: self.load[hi] > self.load[lo]
                                  and self.glob.get(hi, 0) - self.glob.get(lo, 0) > 1, key=self._glob_key):
                return

    def _glob_key(self, b: int) -> tuple[int, int, int]:
        return self.glob.get(b, 0), self.load[b], b

    def _one_move(self, worth: Callable[[int, int], bool],
                  key: Callable[[int], tuple[int, int, int]] | None = None) -> bool:
        k = key or self.low
        for hi in sorted(self.allowed, key=k, reverse=True):
            for lo in sorted(self.allowed, key=k):
                if hi == lo or not worth(hi, lo):
                    continue
                for p in sorted(self.parts, reverse=True):
                    replicas = self.parts[p]
                    if hi in replicas and self.fits(replicas, hi, lo):
                        self.move(p, replicas.index(hi), lo)
                        return True
        return False


def _check(topic: str, parts: Mapping[int, Iterable[int]], allowed: list[int]) -> dict[int, list[int]]:
    if not allowed:
        raise BalanceError("no brokers to place replicas on")
    out = {p: list(dict.fromkeys(r)) for p, r in sorted(parts.items())}
    for p, replicas in out.items():
        if len(replicas) > len(allowed):
            raise BalanceError(f"topic {topic} has replication factor {len(replicas)} (partition {p}), more than "
                               f"the {len(allowed)} brokers {allowed}")
    return out


def balance_topic(topic: str, current: Mapping[int, Iterable[int]], brokers: Iterable[int],
                  racks: Racks | None = None, cluster_load: dict[int, int] | None = None,
                  cluster_leaders: dict[int, int] | None = None, even_cluster: bool = False) -> Assignment:
    """`current` (partition → replicas) moved onto `brokers`, rack-aware, balanced, with few
    moves. `cluster_load`/`cluster_leaders` (broker → replicas/leaders of the topics placed so
    far) break ties and are updated; `even_cluster` also moves replicas to even those totals."""
    allowed = sorted(set(brokers))
    parts = _check(topic, current, allowed)
    glob = cluster_load if cluster_load is not None else {}
    if cluster_load is None:
        for r in parts.values():
            for b in r:
                glob[b] = glob.get(b, 0) + 1
    t = _Topic(parts, allowed, effective_racks(allowed, racks), glob)
    t.evacuate()
    t.spread_racks()
    t.level()
    if even_cluster:
        t.level_cluster()
    out: Assignment = {p: tuple(r) for p, r in parts.items()}
    return spread_leaders(out, allowed, racks, cluster_leaders)


def spread_leaders(assignment: Assignment, brokers: Iterable[int], racks: Racks | None = None,
                   cluster_leaders: dict[int, int] | None = None) -> Assignment:
    """Reorder replicas so each broker is preferred leader of at most ceil(partitions / brokers)
    partitions where the replica sets allow it; a partition keeps its first replica when it can.
    Ties go to the rack, then the broker, leading fewest (`cluster_leaders`, updated)."""
    allowed = sorted(set(brokers))
    cap = ceil(len(assignment) / len(allowed)) if allowed and assignment else 0
    rack_of = effective_racks(allowed, racks)
    glob = cluster_leaders if cluster_leaders is not None else {}
    led = dict.fromkeys(allowed, 0)
    rack_led: dict[str, int] = {}
    out: Assignment = {}
    for p, replicas in sorted(assignment.items()):
        first = replicas[0] if replicas else None
        if first is not None and led.get(first, cap) < cap:
            leader = first
        elif replicas:
            leader = min(replicas, key=lambda b: (led.get(b, cap), rack_led.get(rack_of.get(b, ""), 0),
                                                  glob.get(b, 0), b))
        else:
            out[p] = replicas
            continue
        led[leader] = led.get(leader, 0) + 1
        rack_led[rack_of.get(leader, "")] = rack_led.get(rack_of.get(leader, ""), 0) + 1
        glob[leader] = glob.get(leader, 0) + 1
        out[p] = (leader, *[b for b in replicas if b != leader])
    _even_leaders(out, led, cap)
    return out


def _even_leaders(out: Assignment, led: dict[int, int], cap: int) -> None:
    """Where the greedy pass left a broker over `cap`, hand leaderships along a chain of
    partitions to a broker under it (an augmenting path), as long as one exists."""
    stuck: set[int] = set()
    for _ in range(len(out) + 1):
        over = [b for b, n in led.items() if n > cap and b not in stuck]
        if not over:
            return
        path = _chain(out, led, over[0], cap)
        if path is None:
            stuck.add(over[0])
            continue
        for p, to in path:
            frm = out[p][0]
            out[p] = (to, *[b for b in out[p] if b != to])
            led[frm] -= 1
            led[to] = led.get(to, 0) + 1


def _chain(out: Assignment, led: dict[int, int], start: int, cap: int) -> list[tuple[int, int]] | None:
    """Breadth-first: partitions to hand over, from `start` to a broker leading fewer than `cap`."""
    came: dict[int, tuple[int, int] | None] = {start: None}
    queue = [start]
    while queue:
        x = queue.pop(0)
        for p, r in sorted(out.items()):
            if not r or r[0] != x:
                continue
            for y in r[1:]:
                if y in came or y not in led:
                    continue
                came[y] = (p, x)
                if led[y] < cap:
                    path = []
                    node: int = y
                    while (step := came[node]) is not None:
                        path.append((step[0], node))
                        node = step[1]
                    return path[::-1]
                queue.append(y)
    return None


def balance(current: Mapping[str, Mapping[int, Iterable[int]]], brokers: Iterable[int],
            racks: Racks | None = None) -> dict[str, Assignment]:
    """Every topic of `current` balanced onto `brokers` (BalanceError names a topic that cannot be)."""
    brokers = list(brokers)
    load = _cluster_load(current)
    leaders: dict[int, int] = {}
    return {t: balance_topic(t, parts, brokers, racks, load, leaders) for t, parts in sorted(current.items())}


def rebalance(current: Mapping[str, Mapping[int, Iterable[int]]], brokers: Iterable[int],
              racks: Racks | None = None) -> dict[str, Assignment]:
    """An on-demand rebalance: `balance`, then replicas and preferred leaders evened across the
    brokers' totals too: each topic stays within one replica per broker (so `balance` of the
    result moves nothing) and no broker leads more than ceil(partitions / brokers) where the
    replica sets allow it."""
    brokers = sorted(set(brokers))
    load = _cluster_load(current)
    first = {t: balance_topic(t, parts, brokers, racks, load) for t, parts in sorted(current.items())}
    # second pass: level the totals, then spread the leaders over the final replica sets
    out = {t: balance_topic(t, parts, brokers, racks, load, even_cluster=True) for t, parts in first.items()}
    keys = [(t, p) for t, parts in out.items() for p in parts]
    flat = spread_leaders({i: out[t][p] for i, (t, p) in enumerate(keys)}, brokers, racks)
    for i, (t, p) in enumerate(keys):
        out[t][p] = flat[i]
    return out


def _cluster_load(current: Mapping[str, Mapping[int, Iterable[int]]]) -> dict[int, int]:
    load: dict[int, int] = {}
    for parts in current.values():
        for r in parts.values():
            for b in dict.fromkeys(r):
                load[b] = load.get(b, 0) + 1
    return load


def moves(current: Mapping[str, Mapping[int, Iterable[int]]], proposed: Mapping[str, Assignment]
          ) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) → new replicas, for the partitions whose replica list changes."""
    return {(t, p): r for t, parts in sorted(proposed.items()) for p, r in sorted(parts.items())
            if tuple(current[t][p]) != r}


def per_broker(assignment: Mapping[str, Mapping[int, Iterable[int]]]) -> dict[int, tuple[int, int]]:
    """broker → (replicas, preferred leaderships)."""
    out: dict[int, list[int]] = {}
    for parts in assignment.values():
        for r in parts.values():
            r = list(r)
            for i, b in enumerate(r):
                c = out.setdefault(b, [0, 0])
                c[0] += 1
                c[1] += i == 0
    return {b: (c[0], c[1]) for b, c in sorted(out.items())}


def change_replication_factor(topic: str, current: Mapping[int, Iterable[int]], replicas: int,
                              brokers: Iterable[int], racks: Racks | None = None) -> Assignment:
    """`current` with `replicas` replicas per partition: added ones go to the allowed brokers with
    the fewest replicas of the topic (in a rack with room), removed ones leave the most loaded
    brokers; the preferred leader (first replica) stays unless its broker is not allowed."""
    allowed = sorted(set(brokers))
    if replicas < 1 or replicas > len(allowed):
        raise BalanceError(f"topic {topic}: replication factor {replicas} needs between 1 and the "
                           f"{len(allowed)} brokers {allowed}")
    parts = {p: [b for b in dict.fromkeys(r) if b in allowed] for p, r in sorted(current.items())}
    t = _Topic(parts, allowed, effective_racks(allowed, racks), {})
    load = t.load
    for r in parts.values():
        while len(r) > replicas:
            victim = max(r[1:], key=lambda b: (load[b], b))
            r.remove(victim)
            load[victim] -= 1
        while len(r) < replicas:
            free = [b for b in allowed if b not in r]
            choice = min([b for b in free if t.fits(r, None, b)] or free, key=lambda b: (load[b], b))
            r.append(choice)
            load[choice] += 1
    return {p: tuple(r) for p, r in parts.items()}
