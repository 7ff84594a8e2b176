"""One-member-at-a-time reconfiguration steps over /zookeeper/config (plain data)."""

import pytest

from odradek.operator.zookeeper_reconfig import (
    HELD,
    REFUSED,
    SCALING,
    Decision,
    Ensemble,
    Member,
    Step,
    decide,
    next_step,
    parse_conf,
    parse_config,
    quorum,
    voters,
)

CONFIG = (b"server.1=zk-0:2888:3888:participant;0.0.0.0:2181\n"
          b"server.2=zk-1:2888:3888:participant;0.0.0.0:2181\n"
          b"server.3=zk-2:2888:3888:participant;0.0.0.0:2181\n"
          b"server.9=zk-8:2888:3888:observer;0.0.0.0:2181\n"
          b"version=10000000a\n")


def test_parse_and_voters():
    members, version = parse_config(CONFIG)
    assert sorted(members) == [1, 2, 3, 9] and version == 0x10000000A
    assert voters(members) == [1, 2, 3]  # an observer casts no vote
    assert parse_config(b"garbage\nserver.x=1\n") == ({}, None)


def test_up_one_at_a_time_then_down_highest_first():
    members = parse_config(CONFIG)[0]
    steps = []
    for desired in (5, 3):
        for _ in range(5):
            step = next_step(members, desired)
            if step is None:
                break
            steps.append(step)
            if step.add is not None:
                members[step.add] = Member(step.add, f"zk-{step.add - 1}", 2888, 3888, 2181).line().split("=", 1)[1]
            else:
                del members[step.remove]
    assert [(s.add, s.remove) for s in steps] == [(4, None), (5, None), (None, 5), (None, 4)]
    assert voters(members) == [1, 2, 3]
    with pytest.raises(ValueError):
        next_step(members, 0)


def test_member_line_and_quorum():
    assert Member(4, "zk-3.h", 2888, 3888, 2181).line() == "server.4=zk-3.h:2888:3888:participant;0.0.0.0:2181"
    assert [quorum(n) for n in (1, 3, 4, 5)] == [1, 2, 3, 3]


def _members(n: int) -> dict[int, str]:
    return {i: Member(i, f"zk-{i - 1}", 2888, 3888, 2181).line().split("=", 1)[1] for i in range(1, n + 1)}


def _all(n: int) -> frozenset[int]:
    return frozenset(range(1, n + 1))


@pytest.mark.parametrize(("state", "replicas", "reconfig", "reason"), [
    # nothing to do
    (Ensemble(3, 3, _members(3), _all(3)), 3, None, None),
    (Ensemble(3, 3, None), 3, None, None),  # not answering, not scaling: keep
    (Ensemble(5, 3, None), 3, None, SCALING),  # cannot decide without the configuration
    # up: start the next member, wait for it to sync, add it
    (Ensemble(5, 3, _members(3), _all(3)), 4, None, SCALING),
    (Ensemble(5, 4, _members(3), _all(3)), 4, None, SCALING),
    (Ensemble(5, 4, _members(3), _all(4)), 4, Step(add=4), SCALING),
    (Ensemble(5, 4, _members(4), _all(4)), 5, None, SCALING),
    (Ensemble(5, 5, _members(4), _all(5)), 5, Step(add=5), SCALING),
    (Ensemble(5, 5, _members(5), _all(5)), 5, None, None),
    # down: remove the highest voter while all serve, then shrink
    (Ensemble(3, 5, _members(5), _all(5)), 5, Step(remove=5), SCALING),
    (Ensemble(3, 5, _members(4), _all(4)), 4, None, SCALING),
    (Ensemble(3, 4, _members(4), _all(4)), 4, Step(remove=4), SCALING),
    (Ensemble(3, 4, _members(3), _all(3)), 3, None, SCALING),
    # a voter down holds every step (a pod without a vote is still stopped)
    (Ensemble(5, 3, _members(3), frozenset({1, 2})), 3, None, HELD),
    (Ensemble(5, 4, _members(3), frozenset({1, 3, 4})), 4, None, HELD),
    (Ensemble(3, 5, _members(5), frozenset({1, 2, 3, 4})), 5, None, HELD),
    (Ensemble(3, 5, _members(4), frozenset({1, 2})), 4, None, SCALING),
    # a step cut short: pods without a vote stop first, missing voter pods start
    (Ensemble(5, 5, _members(3), _all(5)), 4, None, SCALING),
    (Ensemble(3, 2, _members(4), _all(2)), 4, None, SCALING),
    (Ensemble(4, 5, _members(4), _all(5)), 4, None, SCALING),
    # refused: through fewer than three members, or voters not 1..k
    (Ensemble(3, 1, _members(1), _all(1)), 1, None, REFUSED),
    (Ensemble(2, 3, _members(3), _all(3)), 3, None, REFUSED),
    (Ensemble(1, 3, _members(3), _all(3)), 3, None, REFUSED),
    (Ensemble(5, 3, {i: v for i, v in _members(4).items() if i != 2}, _all(4)), 3, None, REFUSED),
])
def test_decide_every_state(state, replicas, reconfig, reason):
    d = decide(state)
    assert (d.replicas, d.reconfig) == (replicas, reconfig)
    found = (d.progress or d.refused or (None,))[0]
    assert found == reason, d
    assert not (d.progress and d.refused)


def test_decide_walks_3_to_5_to_3_one_change_per_pass_with_a_quorum():
    """Play the decisions against a model ensemble: each pass changes one thing, and the voters
    always have a serving quorum."""
    members, replicas = _members(3), 3
    changes = []
    for desired in (5, 3):
        for _ in range(20):
            serving = frozenset(range(1, replicas + 1))  # every running pod serves at once in the model
            d = decide(Ensemble(desired, replicas, dict(members), serving))
            if d == Decision(replicas):
                break
            assert (d.replicas != replicas) + (d.reconfig is not None) == 1
            replicas = d.replicas
            if d.reconfig is not None and d.reconfig.add is not None:
                members[d.reconfig.add] = _members(d.reconfig.add)[d.reconfig.add]
            elif d.reconfig is not None:
                del members[d.reconfig.remove]
            assert len(set(voters(members)) & set(range(1, replicas + 1))) >= quorum(len(voters(members)))
            changes.append((replicas, d.reconfig))
        assert voters(members) == list(range(1, desired + 1)) and replicas == desired
    assert changes == [(4, None), (4, Step(add=4)), (5, None), (5, Step(add=5)),
                       (5, Step(remove=5)), (4, None), (4, Step(remove=4)), (3, None)]


CONF = (b"clientPort=2181\ndataDir=/data\nserverId=1\npeerType=0\nmembership: \n"
        b"server.1=zk-0:2888:3888:participant;0.0.0.0:2181\nserver.2=zk-1:2888:3888:participant;0.0.0.0:2181\n"
        b"server.3=zk-2:2888:3888:participant;0.0.0.0:2181\nversion=100000002\n")


def test_parse_conf_reads_the_membership_of_a_conf_answer():
    assert voters(parse_conf(CONF)) == [1, 2, 3]
    assert parse_conf(b"clientPort=2181\nserverId=1\n") is None  # not part of a quorum


async def _four_letter_servers(answers: dict[int, dict[bytes, bytes]], asked: list | None = None):
    """In-process stand-ins for members: each answers its words and closes, as ZooKeeper does;
    `asked` collects (member, word)."""
    import asyncio

    servers = {}
    for member, words in answers.items():
        async def handle(reader, writer, words=words, member=member):
            word = await reader.read(4)
            if asked is not None:
                asked.append((member, word))
            writer.write(words.get(word, b""))
            await writer.drain()
            writer.close()
        servers[member] = await asyncio.start_server(handle, "127.0.0.1", 0)
    return servers


@pytest.mark.asyncio
async def test_observe_asks_every_member_and_reads_the_leaders_conf():
    from odradek.operator.zookeeper_ensemble import observe

    leader = {b"srvr": b"Zookeeper version: 3.8\nMode: leader\n", b"conf": CONF}
    follower = {b"srvr": b"Zookeeper version: 3.8\nMode: follower\n", b"conf": b"stale, not read"}
    down = {b"srvr": b"This ZooKeeper instance is not currently serving requests\n"}
    servers = await _four_letter_servers({1: follower, 2: leader, 3: down})
    try:
        members = {i: Member(i, "127.0.0.1", 1, 1, s.sockets[0].getsockname()[1], client_host="127.0.0.1")
                   for i, s in servers.items()}
        seen = await observe(members)
        assert seen.serving == frozenset({1, 2}) and voters(seen.members) == [1, 2, 3]
        # without a serving leader nothing is decided from a follower's (possibly stale) view
        seen = await observe({1: members[1], 3: members[3]})
        assert seen.members is None and seen.serving == frozenset({1})
    finally:
        for s in servers.values():
            s.close()
            await s.wait_closed()


@pytest.mark.asyncio
async def test_the_plan_refuses_small_ensembles_without_asking_and_keeps_a_silent_one():
    from odradek.dev.zookeeper import free_port
    from odradek.operator.models import parse_spec
    from odradek.operator.reconciler import zookeeper_plan

    body = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}}
    asked = []

    def nowhere(_body, count):
        asked.append(count)
        port = free_port()  # nothing listens: connection refused
        return {i: Member(i, "127.0.0.1", 1, 1, port, client_host="127.0.0.1") for i in range(1, count + 1)}

    live = {"spec": {"replicas": 3}}
    plan = await zookeeper_plan(body, parse_spec({"zookeeper": {"replicas": 1}}), live, nowhere)
    assert plan.replicas == 3 and plan.refused[0] == REFUSED and asked == []
    plan = await zookeeper_plan(body, parse_spec({}), live, nowhere)  # steady, the ensemble silent: keep
    assert (plan.replicas, plan.progress, plan.refused, plan.reconfig) == (None, None, None, None)
    plan = await zookeeper_plan(body, parse_spec({"zookeeper": {"replicas": 5}}), live, nowhere)
    assert plan.replicas == 3 and plan.progress[0] == SCALING and plan.reconfig is None
    assert asked == [3, 5]
    plan = await zookeeper_plan(body, parse_spec({"zookeeper": {"connect": "zk:2181/x"}}), live, nowhere)
    assert plan == type(plan)()  # an existing ensemble: never scaled


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_a_settled_ensemble_is_not_asked_and_its_secret_not_read_on_every_pass():
    """Once a pass saw voters 1..3 and rendered 3 members, later passes neither ask the members
    (`srvr`, `conf`) nor read the admin Secret; the StatefulSet's record of the voters is what
    makes a pass ask again (here: dropped, as by an older operator version)."""
    import kmock
    import operator_harness as h

    from odradek.operator.reconciler import ZOOKEEPER_VOTERS

    leader = {b"srvr": b"Zookeeper version: 3.8\nMode: leader\n", b"conf": CONF}
    follower = {b"srvr": b"Zookeeper version: 3.8\nMode: follower\n"}
    asked: list = []
    servers = await _four_letter_servers({1: leader, 2: follower, 3: follower}, asked)
    members = {i: Member(i, "127.0.0.1", 1, 1, s.sockets[0].getsockname()[1], client_host="127.0.0.1")
               for i, s in servers.items()}

    def source(_body, count):
        return {i: members[i] for i in range(1, count + 1)}

    def secret_reads(server) -> int:
        return sum(1 for r in list(server) if r.action is not None and r.action.name == "FETCH"
                   and r.resource is not None and r.resource.plural == "secrets" and r.name == "demo-zookeeper-admin")

    def recorded():
        return ((server.live(h.STS, h.NS, "demo-zookeeper") or {}).get("metadata", {}).get("annotations") or {}).get(
            ZOOKEEPER_VOTERS)

    server = h.new_server()
    async with server, kmock.Server(server) as http:
        view = h.ScriptedView()
        kubelet = h.Kubelet(server, view)
        kubelet.start()
        api = h.Api(str(http.url))
        operator = h.OperatorThread(str(http.url), view, zookeeper_members=source)
        try:
            await api.create_cluster({})
            await h.wait_for(lambda: recorded() == "3", 20, "the voters recorded on the StatefulSet")
            await view.passes(2)
            before, reads = len(asked), secret_reads(server)
            assert before > 0 and reads > 0 and server.live(h.SECRETS, h.NS, "demo-zookeeper-admin") is not None
            await view.passes(4)
            assert len(asked) == before, asked[before:]
            assert secret_reads(server) == reads
            assert h.condition(server.live("odradek.io/v1alpha1/kafkaclusters", h.NS, "demo"), "Progressing").get(
                "reason") != "ZooKeeperScaling"
            # without the record (an operator version before it) the next pass asks, and records
            sts = server.live(h.STS, h.NS, "demo-zookeeper")
            annotations = {k: v for k, v in sts["metadata"]["annotations"].items() if k != ZOOKEEPER_VOTERS}
            server.put_raw(h.STS, h.NS, {**sts, "metadata": {**sts["metadata"], "annotations": annotations}})
            await h.wait_for(lambda: recorded() == "3", 20, "the voters recorded again")
            assert len(asked) > before
        finally:
            await operator.stop()
            await kubelet.stop()
            await api.close()
            for s in servers.values():
                s.close()
                await s.wait_closed()
