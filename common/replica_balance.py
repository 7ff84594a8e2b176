"""Balanced replica placement that moves as little as it can: a pure function over assignments.

Used by `odradek reassign --generate` and by the operator when brokers are added or drained. Per
topic, replicas on brokers that are not allowed move to the least loaded allowed broker, then
replicas move one at a time from the most to the least loaded broker until no two brokers differ
by more than one replica; a moved replica takes the slot of the one it replaces. Then the
preferred leaders (first replicas) are spread, by reordering only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import ceil

Assignment = dict[int, tuple[int, ...]]
"""partition → replicas (the first is the preferred leader)."""


class BalanceError(ValueError):
    """The assignment cannot be placed on these brokers (names the topic)."""


def balance_topic(topic: str, current: Mapping[int, Iterable[int]], brokers: Iterable[int]) -> Assignment:
    """`current` (partition → replicas) moved onto `brokers`, balanced, with few moves."""
    allowed = sorted(set(brokers))
    parts = {p: list(dict.fromkeys(r)) for p, r in sorted(current.items())}
    if not allowed:
        raise BalanceError("no brokers to place replicas on")
    for p, replicas in parts.items():
        if len(replicas) > len(allowed):
            raise BalanceError(f"topic {topic} has replication factor {len(replicas)} (partition {p}), more than "
                               f"the {len(allowed)} brokers {allowed}")
    load = dict.fromkeys(allowed, 0)
    for replicas in parts.values():
        for b in replicas:
            if b in load:
                load[b] += 1
    # replicas on brokers that are not allowed go to the least loaded allowed broker
    for replicas in parts.values():
        for i, b in enumerate(replicas):
            if b not in load:
                u = min((x for x in allowed if x not in replicas), key=lambda x: (load[x], x))
                replicas[i] = u
                load[u] += 1
    # then level: a replica of the most loaded broker moves to the least loaded one, in a
    # partition that lacks it (one always exists while their loads differ); each move lowers
    # the sum of squared loads, so this ends, and only excess replicas move
    for _ in range(sum(len(r) for r in parts.values()) * len(allowed) + 1):
        hi = max(allowed, key=lambda x: (load[x], -x))
        lo = min(allowed, key=lambda x: (load[x], x))
        if load[hi] - load[lo] <= 1:
            break
        p = max(q for q, r in parts.items() if hi in r and lo not in r)
        replicas = parts[p]
        replicas[replicas.index(hi)] = lo
        load[hi] -= 1
        load[lo] += 1
    out: Assignment = {p: tuple(r) for p, r in parts.items()}
    return spread_leaders(out, allowed)


def spread_leaders(assignment: Assignment, brokers: Iterable[int]) -> Assignment:
    """Reorder replicas so each broker is preferred leader of at most ceil(partitions / brokers)
    partitions where the replica sets allow it; a partition keeps its first replica when it can."""
    allowed = sorted(set(brokers))
    cap = ceil(len(assignment) / len(allowed)) if allowed and assignment else 0
    led = dict.fromkeys(allowed, 0)
    out: Assignment = {}
    for p, replicas in sorted(assignment.items()):
        first = replicas[0] if replicas else None
        if first is not None and led.get(first, cap) < cap:
            leader = first
        elif replicas:
            leader = min(replicas, key=lambda b: (led.get(b, cap), b))
        else:
            out[p] = replicas
            continue
        led[leader] = led.get(leader, 0) + 1
        out[p] = (leader, *[b for b in replicas if b != leader])
    return out


def balance(current: Mapping[str, Mapping[int, Iterable[int]]], brokers: Iterable[int]) -> dict[str, Assignment]:
    """Every topic of `current` balanced onto `brokers` (BalanceError names a topic that cannot be)."""
    brokers = list(brokers)
    return {t: balance_topic(t, parts, brokers) for t, parts in sorted(current.items())}


def moves(current: Mapping[str, Mapping[int, Iterable[int]]], proposed: Mapping[str, Assignment]
          ) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) → new replicas, for the partitions whose replica list changes."""
    return {(t, p): r for t, parts in sorted(proposed.items()) for p, r in sorted(parts.items())
            if tuple(current[t][p]) != r}


def change_replication_factor(topic: str, current: Mapping[int, Iterable[int]], replicas: int,
                              brokers: Iterable[int]) -> Assignment:
    """`current` with `replicas` replicas per partition: added ones go to the allowed brokers with
    the fewest replicas of the topic, removed ones leave the most loaded brokers; the preferred
    leader (first replica) stays unless its broker is not allowed."""
    allowed = sorted(set(brokers))
    if replicas < 1 or replicas > len(allowed):
        raise BalanceError(f"topic {topic}: replication factor {replicas} needs between 1 and the "
                           f"{len(allowed)} brokers {allowed}")
    parts = {p: [b for b in dict.fromkeys(r) if b in allowed] for p, r in sorted(current.items())}
    load = dict.fromkeys(allowed, 0)
    for r in parts.values():
        for b in r:
            load[b] += 1
    for r in parts.values():
        while len(r) > replicas:
            victim = max(r[1:], key=lambda b: (load[b], b))
            r.remove(victim)
            load[victim] -= 1
        while len(r) < replicas:
            choice = min((b for b in allowed if b not in r), key=lambda b: (load[b], b))
            r.append(choice)
            load[choice] += 1
    return {p: tuple(r) for p, r in parts.items()}
