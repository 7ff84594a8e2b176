"""One-member-at-a-time reconfiguration steps over /zookeeper/config (plain data)."""

import pytest

from odradek.operator.zookeeper_reconfig import Member, next_step, parse_config, quorum, voters

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
