"""The operator scales a real ZooKeeper ensemble 3 -> 5 -> 3 through the KafkaCluster spec
(issue 28 item 6): pods are real ZooKeeper servers run from the rendered start script
(zookeeper_kubelet), a client writes throughout, no acknowledged write is lost, every observed
state has a serving quorum of the committed voters, a voting member down holds the scale, and an
operator restarted mid-scale resumes."""

import asyncio
import base64
import logging
import re
import shutil
import threading
import time
from pathlib import Path

import kmock
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from operator_harness import NS, STS, Api, Kubelet, OperatorThread, ScriptedView, condition, new_server, wait_for
from zookeeper_kubelet import ZooKeeperKubelet, local_members

from odradek.dev.processes import stop_process
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import CLASSPATH_JARS
from odradek.operator import builders
from odradek.operator.models import parse_spec
from odradek.operator.zookeeper_reconfig import quorum, super_digest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420),
              pytest.mark.skipif(shutil.which("java") is None or not Path(CLASSPATH_JARS[0]).exists(),
                                 reason="needs Debian's zookeeper package")]


class Writer:
    """Creates /w/<n> one after another through every member's client port, remembering each
    acknowledged one and the longest time between two acknowledgements."""

    def __init__(self, hosts: str):
        self.client = KazooClient(hosts=hosts, timeout=10)
        self.acked: list[str] = []
        self.longest_gap = 0.0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, name="zk-writer", daemon=True)

    def start(self) -> None:
        self.client.start(timeout=30)
        self.client.ensure_path("/w")
        self.thread.start()

    def run(self) -> None:
        last = time.monotonic()
        n = 0
        while not self.stop_flag.is_set():
            path = f"/w/{n:06d}"
            try:
                self.client.create(path, b"x")
            except NodeExistsError:
                pass  # an earlier attempt was applied and its answer lost
            except Exception:  # the session moving to another member: the same write again
                self.stop_flag.wait(0.1)
                continue
            now = time.monotonic()
            self.longest_gap, last = max(self.longest_gap, now - last), now
            self.acked.append(path)
            n += 1
            self.stop_flag.wait(0.05)

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(30)
        assert not self.thread.is_alive()

    def stored(self) -> set[str]:
        self.client.sync("/w")
        return {f"/w/{c}" for c in self.client.get_children("/w")}

    def close(self) -> None:
        self.client.stop()
        self.client.close()


@pytest.mark.asyncio
async def test_the_operator_scales_the_ensemble_3_to_5_to_3_with_a_quorum_throughout(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    server = new_server()
    members = local_members(5)
    async with server, kmock.Server(server) as http:
        url = str(http.url)
        view = ScriptedView()
        brokers = Kubelet(server, view)
        zk = ZooKeeperKubelet(server, NS, "demo", tmp_path, members, brokers)
        api = Api(url)
        writer = Writer(",".join(f"127.0.0.1:{m.client_port}" for m in members.values()))
        operator = None
        formed = 0
        timings: list[float] = []
        seen: list[tuple[int, tuple[int, ...] | None, frozenset[int]]] = []
        messages: set[str] = set()
        stop_watch = asyncio.Event()

        def cluster():
            return server.live("odradek.io/v1alpha1/kafkaclusters", NS, "demo")

        def replicas():
            return ((server.live(STS, NS, "demo-zookeeper") or {}).get("spec") or {}).get("replicas")

        async def watch():
            """Every observed state: the StatefulSet's size, the committed voters, who serves."""
            loop = asyncio.get_running_loop()
            while not stop_watch.is_set():
                voters, serving = await loop.run_in_executor(None, zk.state)
                state = (replicas(), None if voters is None else tuple(voters), serving)
                if not seen or seen[-1] != state:
                    seen.append(state)
                await asyncio.sleep(0.2)

        async def settled(n: int, timeout: float) -> None:
            await wait_for(lambda: seen and seen[-1][:2] == (n, tuple(range(1, n + 1)))
                           and seen[-1][2] >= set(range(1, n + 1))
                           and condition(cluster(), "Progressing").get("reason") != "ZooKeeperScaling",
                           timeout, f"{n} voting members and a StatefulSet of {n}")

        brokers.start()
        zk.start()
        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            operator = OperatorThread(url, view, zookeeper_members=zk.member_source)
            await api.create_cluster({})  # a managed ensemble of three
            await settled(3, 120)
            # members join one by one after the voters are committed: formed once a quorum serves
            await wait_for(lambda: len(set(seen[-1][1]) & seen[-1][2]) >= quorum(3), 60, "a quorum serving", step=0.2)
            formed = len(seen) - 1  # from here on the ensemble has had its quorum
            await asyncio.get_running_loop().run_in_executor(None, writer.start)

            # a voting member down holds the scale: nothing starts, nothing is reconfigured (a
            # follower: pausing the leader would add an election, which is not what is tested)
            down = await asyncio.get_running_loop().run_in_executor(
                None, lambda: next(i for i in (1, 2, 3) if zk.mode(i) == "follower"))
            zk.pause(down)
            await api.patch_spec({"zookeeper": {"replicas": 5}})
            await wait_for(lambda: condition(cluster(), "Progressing").get("reason") == "ZooKeeperMemberDown", 60,
                           "the scale held")
            await asyncio.sleep(2)
            assert replicas() == 3 and zk.started == [1, 2, 3]
            zk.pause(down, False)
            timings = [time.monotonic()]
            # the operator restarted mid-scale (member 4 started, not yet added) resumes from
            # what the ensemble reports
            await wait_for(lambda: replicas() == 4, 120, "member 4 starting")
            await operator.stop()
            operator = OperatorThread(url, view, zookeeper_members=zk.member_source)
            await settled(5, 180)
            timings.append(time.monotonic())
            await api.patch_spec({"zookeeper": {"replicas": 3}})
            await settled(3, 180)
            timings.append(time.monotonic())
            await asyncio.sleep(1)  # writes after the last step
            await asyncio.get_running_loop().run_in_executor(None, writer.stop)
            stored = await asyncio.get_running_loop().run_in_executor(None, writer.stored)
        finally:
            if writer.thread.is_alive() or writer.client.connected:
                await asyncio.get_running_loop().run_in_executor(None, writer.stop)
                await asyncio.get_running_loop().run_in_executor(None, writer.close)
            stop_watch.set()
            await watcher
            if operator is not None:
                await operator.stop()
            await zk.stop()
            await brokers.stop()
            await api.close()

        assert len(writer.acked) > 20, "the client wrote throughout"
        assert set(writer.acked) <= stored, "no acknowledged write lost"
        # every observed state with voters: a quorum of them serving
        for size, voters, serving in seen[formed:]:
            if voters is not None:
                assert len(set(voters) & serving) >= quorum(len(voters)), (size, voters, serving, seen)
        # the walk, one member at a time, as the status reported it (every status write)
        for r in list(server):
            if r.subresource == "status" and isinstance(r.data, dict):
                for c in (r.data.get("status") or {}).get("conditions") or []:
                    if c.get("type") == "Progressing" and c.get("reason") == "ZooKeeperScaling":
                        messages.add(c["message"])
        steps = [s[:2] for s in seen if s[1] is not None]  # sampled: a state of one pass can be missed
        done = [re.search(r"(adding|removing) member \d", r.getMessage()).group(0) for r in caplog.records
                if r.name == "odradek.operator.reconciler" and r.getMessage().endswith(" done")]
        assert done == ["adding member 4", "adding member 5", "removing member 5", "removing member 4"], done
        for text in ("3 → 5 members: adding member 4", "4 → 5 members: adding member 5",
                     "5 → 3 members: removing member 5", "4 → 3 members: removing member 4"):
            assert text in messages, messages
        assert zk.started[:3] == [1, 2, 3] and sorted(zk.started[3:]) == [4, 5], "no member restarted"
        password = base64.b64decode(server.live("v1/secrets", NS, "demo-zookeeper-admin")["data"]["password"]).decode()
        assert password not in caplog.text and password not in str(cluster().get("status"))
        print(f"states {seen[formed:]}")
        print(f"steps {steps}; {len(writer.acked)} writes, longest gap {writer.longest_gap:.1f}s; "
              f"3 -> 5 (with an operator restart) {timings[1] - timings[0]:.1f}s, 5 -> 3 {timings[2] - timings[1]:.1f}s")



def test_a_static_ensemble_rolls_onto_the_start_script_keeping_its_data_and_quorum(tmp_path):
    """An operator upgrade: members started with a static server list (what the image's
    entrypoint wrote from the ZOO_SERVERS the operator rendered before) restart one at a time
    from the new start script on the same volumes; every step keeps a quorum and the data, and
    the rolled ensemble then takes a reconfig as the digest's super user."""
    members = local_members(4)
    body = {"metadata": {"name": "demo", "namespace": NS, "uid": "u"}, "spec": {}}
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in builders.desired_objects(body, parse_spec({}))}
    found = {"sts": rendered[("StatefulSet", "demo-zookeeper")],
             "members": rendered[("ConfigMap", "demo-zookeeper-members")],
             "env": rendered[("ConfigMap", "demo-zookeeper")],
             "admin": {"data": {"digest": base64.b64encode(super_digest("pw").encode()).decode()}}}
    zk = ZooKeeperKubelet(None, NS, "demo", tmp_path, members)
    old = {}
    client = None

    def quorum_of_three():
        return sum(zk.mode(i) in ("leader", "follower") for i in (1, 2, 3)) == 3

    try:
        servers = "".join(f"server.{j}=127.0.0.1:{members[j].quorum_port}:{members[j].election_port};"
                          f"127.0.0.1:{members[j].client_port}\n" for j in (1, 2, 3))
        for i in (1, 2, 3):
            pod = tmp_path / f"pod-{i - 1}"
            (pod / "data").mkdir(parents=True)
            (pod / "data" / "myid").write_text(f"{i}\n")
            (pod / "old.cfg").write_text(
                f"dataDir={pod / 'data'}\ndataLogDir={pod / 'data' / 'datalog'}\ntickTime=500\ninitLimit=10\n"
                f"syncLimit=5\nstandaloneEnabled=false\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n"
                f"{servers}")
            old[i] = zk.run_java(pod / "old.cfg", pod / "old.log")
        wait_until(quorum_of_three, "a static quorum", 60, interval=0.2)
        client = KazooClient(hosts=",".join(f"127.0.0.1:{members[i].client_port}" for i in (1, 2, 3)), timeout=10)
        client.start(timeout=30)
        client.create("/kept", b"before")
        for i in (1, 2, 3):  # the StatefulSet's roll: one member at a time, each serving before the next
            stop_process(old.pop(i))
            assert zk.start_pod(i - 1, found)
            wait_until(quorum_of_three, f"member {i} back from the start script", 60, interval=0.2)
            client.retry(client.create, f"/after-{i}", b"x")
        client.sync("/")
        assert client.get("/kept")[0] == b"before"
        assert zk.state() == ([1, 2, 3], frozenset({1, 2, 3}))
        four = builders.zookeeper_members(body, 4)
        seed = {"data": {builders.ZK_DYNAMIC_FILE: "".join(four[j].line() + "\n" for j in (1, 2, 3, 4))}}
        assert zk.start_pod(3, {**found, "members": seed})
        wait_until(lambda: zk.mode(4) is not None, "member 4 syncing", 60, interval=0.2)
        admin = KazooClient(hosts=f"127.0.0.1:{members[1].client_port}", timeout=10,
                            auth_data=[("digest", "super:pw")])
        admin.start(timeout=30)
        try:
            admin.reconfig(joining=members[4].line(), leaving=None, new_members=None)
        finally:
            admin.stop()
            admin.close()
        wait_until(lambda: zk.state()[0] == [1, 2, 3, 4], "member 4 voting", 60, interval=0.2)
    finally:
        if client is not None:
            client.stop()
            client.close()
        for p in old.values():
            stop_process(p)
        zk.stop_all()
