"""`odradek reassign`: move partitions between brokers (Kafka's kafka-reassign-partitions.sh).

    odradek reassign --bootstrap-server H:P --generate --topics-to-move-json-file F --broker-list 0,1,2
    odradek reassign --bootstrap-server H:P --execute --reassignment-json-file F [--throttle BYTES_PER_S]
    odradek reassign --bootstrap-server H:P --verify --reassignment-json-file F [--wait SECONDS]
    odradek reassign --bootstrap-server H:P --cancel --reassignment-json-file F

Plans are Kafka's JSON (`{"version":1,"partitions":[{"topic","partition","replicas"}]}`), so
plans made by Kafka's tool work too. --generate prints the current and a balanced proposed
assignment (common/replica_balance: few moves); --execute starts the plan
(AlterPartitionReassignments) and prints the current assignment to roll back to; with --throttle
it first sets, as Kafka's tool does, leader/follower.replication.throttled.rate on the brokers
involved and the moving partitions' leader/follower.replication.throttled.replicas (the current
replicas as leaders, the added ones as followers). --verify says per partition whether it is
complete, shows the bytes moved so far (DescribeLogDirs) and exits 1 while anything is still
moving; once all is complete it removes those throttles. With --wait it polls until done,
printing partitions done, bytes, rate and time left. --cancel cancels the plan's reassignments. Every request is bounded by
--timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from odradek.common.config_def import ConfigException
from odradek.common.network.bootstrap import (
    AdminConnections,
    ToolError,
    add_command_config,
    command_security,
    error_text,
    parse_bootstrap,
    raise_for_error,
)
from odradek.common.reassignment_throttle import BROKER_THROTTLES, TOPIC_THROTTLES, throttled_replicas
from odradek.common.replica_balance import BalanceError, balance
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

Plan = dict[tuple[str, int], tuple[int, ...]]
POLL_S = 1.0
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_SET, OP_DELETE = 0, 1


# --- plans (pure) -----------------------------------------------------------------------------------


def parse_plan(text: str) -> Plan:
    """Kafka's reassignment JSON → (topic, partition) → replicas; ToolError says what is wrong."""
    try:
        obj = json.loads(text)
        entries = obj["partitions"]
        plan: Plan = {}
        for e in entries:
            topic, partition, replicas = e["topic"], e["partition"], e["replicas"]
            if not isinstance(topic, str) or type(partition) is not int or not isinstance(replicas, list) \
                    or not all(type(r) is int for r in replicas):
                raise ToolError(f"malformed entry {e!r}")
            if (topic, partition) in plan:
                raise ToolError(f"partition {topic}-{partition} appears more than once")
            if not replicas or len(set(replicas)) != len(replicas):
                raise ToolError(f"partition {topic}-{partition}: replicas must be distinct and not empty: {replicas}")
            plan[(topic, partition)] = tuple(replicas)
        return plan
    except (ValueError, KeyError, TypeError) as e:
        raise ToolError(f"not a reassignment plan: {e}") from e


def format_plan(plan: Plan) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


def parse_topics(text: str) -> list[str]:
    try:
        topics = [e["topic"] for e in json.loads(text)["topics"]]
    except (ValueError, KeyError, TypeError) as e:
        raise ToolError(f"not a topics-to-move file: {e}") from e
    if not all(isinstance(t, str) for t in topics):
        raise ToolError("topic names must be strings")
    return topics


def propose(current: Plan, brokers: list[int]) -> Plan:
    by_topic: dict[str, dict[int, tuple[int, ...]]] = {}
    for (t, p), r in current.items():
        by_topic.setdefault(t, {})[p] = r
    try:
        proposed = balance(by_topic, brokers)
    except BalanceError as e:
        raise ToolError(str(e)) from e
    return {(t, p): r for t, parts in proposed.items() for p, r in parts.items()}


@dataclass(frozen=True)
class Status:
    """One partition of a plan as --verify sees it."""

    done: bool
    line: str
    bytes_total: int = 0
    bytes_moved: int = 0


def partition_status(tp: tuple[str, int], wanted: tuple[int, ...], current: tuple[int, ...] | None,
                     ongoing: dict[str, Any] | None, sizes: dict[int, int]) -> Status:
    """Kafka's --verify wording; `sizes` maps broker → the partition's bytes there (the leader's
    size is what each added replica must reach)."""
    name = f"{tp[0]}-{tp[1]}"
    if ongoing is not None:
        total = max(sizes.values(), default=0)
        adding = ongoing["adding"]
        moved = sum(min(sizes.get(b, 0), total) for b in adding)
        line = f"Reassignment of partition {name} is still in progress."
        if adding:
            line += f" {_bytes(moved)} of {_bytes(total * len(adding))} copied to {list(adding)}."
        return Status(False, line, total * len(adding), moved)
    if current is None:
        return Status(False, f"Partition {name} does not exist.")
    if tuple(current) == tuple(wanted):
        return Status(True, f"Reassignment of partition {name} is completed.")
    return Status(False, f"There is no active reassignment of partition {name}, but replica set is "
                         f"{list(current)} rather than {list(wanted)}.")


def progress_line(done: int, total: int, moved: int, to_move: int, rate: float | None) -> str:
    line = f"{done}/{total} partitions done, {_bytes(moved)} of {_bytes(to_move)} copied"
    if rate:
        left = max(0, to_move - moved) / rate
        line += f", {_bytes(rate)}/s, about {left:.0f}s left"
    return line


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# --- the cluster ---------------------------------------------------------------------------------------


class Cluster(AdminConnections):
    def __init__(self, bootstrap: str, timeout_s: float, security: ClientSecurity = PLAINTEXT):
        super().__init__(parse_bootstrap(bootstrap), timeout_s, "odradek-reassign", security, software_name="odradek-reassign")

    async def assignment(self, topics: list[str]) -> tuple[Plan, dict[int, tuple[str, int]]]:
        """The current replicas of `topics`' partitions, and the brokers' endpoints."""
        meta = await self.metadata(sorted(set(topics)))
        plan: Plan = {}
        for t in meta.topics:
            if t.error_code == ErrorCode.none:
                for p in t.partitions:
                    plan[(t.name, int(p.partition_index))] = tuple(int(b) for b in p.replica_nodes)
        return plan, {int(b.node_id): (b.host, int(b.port)) for b in meta.brokers}

    async def alter(self, targets: dict[tuple[str, int], tuple[int, ...] | None]) -> dict[tuple[str, int], str | None]:
        """AlterPartitionReassignments; partition → None (accepted) or the error text."""
        topics: dict[str, list[Any]] = {}
        for (t, p), r in sorted(targets.items()):
            topics.setdefault(t, []).append(ReassignablePartition(
                partition_index=i32(p), replicas=None if r is None else tuple(BrokerId(b) for b in r)))
        response = await self.send_any(AlterPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(_timedelta(self.timeout_s)),
            topics=tuple(ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items())))
        raise_for_error(response.error_code, response.error_message)
        out: dict[tuple[str, int], str | None] = {}
        for t in response.responses:
            for p in t.partitions:
                out[(t.name, int(p.partition_index))] = error_text(p.error_code, p.error_message)
        return out

    async def ongoing(self) -> dict[tuple[str, int], dict[str, Any]]:
        response = await self.send_any(ListPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(_timedelta(self.timeout_s)), topics=None))
        raise_for_error(response.error_code, response.error_message)
        return {(t.name, int(p.partition_index)): {"replicas": tuple(int(b) for b in p.replicas),
                                                    "adding": tuple(int(b) for b in p.adding_replicas),
                                                    "removing": tuple(int(b) for b in p.removing_replicas)}
                for t in response.topics for p in t.partitions}

    async def sizes(self, brokers: dict[int, tuple[str, int]], tps: list[tuple[str, int]]
                    ) -> dict[tuple[str, int], dict[int, int]]:
        """Each partition's bytes per broker (DescribeLogDirs to every broker; one that does not
        answer counts as holding nothing)."""
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        request = DescribeLogDirsRequest(topics=tuple(
            DescribableLogDirTopic(topic=TopicName(t), partitions=tuple(i32(p) for p in ps)) for t, ps in sorted(topics.items())))
        out: dict[tuple[str, int], dict[int, int]] = {tp: {} for tp in tps}
        for b, endpoint in sorted(brokers.items()):
            try:
                response = await self.send(endpoint, request)
            except (ConnectionError, TimeoutError, OSError):
                continue
            for d in response.results:
                for t in d.topics:
                    for p in t.partitions:
                        key = (t.name, int(p.partition_index))
                        if key in out:
                            out[key][b] = out[key].get(b, 0) + int(p.partition_size)
        return out


    async def alter_configs(self, endpoint: tuple[str, int] | None, resource_type: int, name: str,
                            changes: dict[str, str | None]) -> None:
        """IncrementalAlterConfigs of one resource (None values are deleted); to `endpoint`, or
        to a bootstrap server. ToolError on a refusal."""
        request = IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=i8(resource_type), resource_name=name, configs=tuple(
                AlterableConfig(name=k, config_operation=i8(OP_DELETE if v is None else OP_SET), value=v)
                for k, v in sorted(changes.items()))),), validate_only=False)
        response = await (self.send(endpoint, request) if endpoint else self.send_any(request))
        for r in response.responses:
            raise_for_error(r.error_code, r.error_message, name)


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


# --- commands --------------------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e}") from e


async def generate(cluster: Cluster, topics_file: str, broker_list: str) -> int:
    topics = parse_topics(_read(topics_file))
    try:
        brokers = [int(b) for b in broker_list.split(",") if b.strip()]
    except ValueError as e:
        raise ToolError(f"--broker-list must be broker ids separated by commas: {broker_list}") from e
    current, _ = await cluster.assignment(topics)
    missing = sorted(set(topics) - {t for t, _ in current})
    if missing:
        raise ToolError(f"topics not found: {missing}")
    print("Current partition replica assignment")
    print(format_plan(current))
    print()
    print("Proposed partition reassignment configuration")
    print(format_plan(propose(current, brokers)))
    return 0


async def execute(cluster: Cluster, plan_file: str, throttle: int | None = None) -> int:
    plan = parse_plan(_read(plan_file))
    current, endpoints = await cluster.assignment(sorted({t for t, _ in plan}))
    print("Current partition replica assignment")
    print()
    print(format_plan({tp: current[tp] for tp in plan if tp in current}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        settings = throttled_replicas(current, plan)
        for b in sorted(settings.brokers & set(endpoints)):
            await cluster.alter_configs(endpoints[b], RESOURCE_BROKER, str(b), settings.broker_configs(throttle))
        for t, values in settings.topics.items():
            await cluster.alter_configs(None, RESOURCE_TOPIC, t, dict(values))
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    errors = {tp: e for tp, e in (await cluster.alter(dict(plan))).items() if e is not None}
    started = sorted(tp for tp in plan if tp not in errors)
    if started:
        print("Successfully started partition reassignments for " + ",".join(f"{t}-{p}" for t, p in started))
    for (t, p), e in sorted(errors.items()):
        print(f"Error reassigning partition {t}-{p}: {e}", file=sys.stderr)
    return 1 if errors else 0


async def verify_once(cluster: Cluster, plan: Plan) -> list[Status]:
    current, brokers = await cluster.assignment(sorted({t for t, _ in plan}))
    ongoing = await cluster.ongoing()
    moving = [tp for tp in plan if tp in ongoing]
    sizes = await cluster.sizes(brokers, moving) if moving else {}
    return [partition_status(tp, plan[tp], current.get(tp), ongoing.get(tp), sizes.get(tp, {}))
            for tp in sorted(plan)]


async def verify(cluster: Cluster, plan_file: str, wait_s: float) -> int:
    plan = parse_plan(_read(plan_file))
    deadline = time.monotonic() + wait_s
    last: tuple[float, int] | None = None
    while True:
        statuses = await verify_once(cluster, plan)
        done = sum(s.done for s in statuses)
        moved, to_move = sum(s.bytes_moved for s in statuses), sum(s.bytes_total for s in statuses)
        now = time.monotonic()
        rate = (moved - last[1]) / (now - last[0]) if last and now > last[0] and moved >= last[1] else None
        last = (now, moved)
        if done == len(statuses) or now >= deadline:
            break
        print(progress_line(done, len(statuses), moved, to_move, rate), flush=True)
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - now)))
    print("Status of partition reassignment:")
    for s in statuses:
        print(s.line)
    print(progress_line(done, len(statuses), moved, to_move, None))
    if done != len(statuses):
        return 1
    await clear_throttles(cluster, sorted({t for t, _ in plan}))
    return 0


async def clear_throttles(cluster: Cluster, topics: list[str]) -> None:
    """What --throttle set (Kafka's --verify removes it once everything is complete)."""
    _, endpoints = await cluster.assignment(topics)
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, sorted(endpoints)))}")
    for b, endpoint in sorted(endpoints.items()):
        try:
            await cluster.alter_configs(endpoint, RESOURCE_BROKER, str(b), dict.fromkeys(BROKER_THROTTLES))
        except (ConnectionError, TimeoutError, OSError) as e:
            print(f"broker {b} did not answer ({e!r}); its throttle rates stay", file=sys.stderr)
    print(f"Clearing topic-level throttles on topics {','.join(topics)}")
    for t in topics:
        await cluster.alter_configs(None, RESOURCE_TOPIC, t, dict.fromkeys(TOPIC_THROTTLES))


async def cancel(cluster: Cluster, plan_file: str) -> int:
    plan = parse_plan(_read(plan_file))
    answers = await cluster.alter(dict.fromkeys(plan))
    cancelled = sorted(tp for tp, e in answers.items() if e is None)
    errors = {tp: e for tp, e in answers.items() if e is not None and not e.startswith("NO_REASSIGNMENT_IN_PROGRESS")}
    if cancelled:
        print("Successfully cancelled partition reassignments for: " + ",".join(f"{t}-{p}" for t, p in cancelled))
    for (t, p), e in sorted(errors.items()):
        print(f"Error cancelling the reassignment of {t}-{p}: {e}", file=sys.stderr)
    return 1 if errors else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="odradek reassign", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    for a in ("--generate", "--execute", "--verify", "--cancel"):
        action.add_argument(a, action="store_true")
    parser.add_argument("--topics-to-move-json-file")
    parser.add_argument("--broker-list")
    parser.add_argument("--reassignment-json-file")
    parser.add_argument("--throttle", type=int, help="--execute: replication bytes/s while moving")
    parser.add_argument("--wait", type=float, default=0.0, help="--verify: poll up to this many seconds")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    add_command_config(parser)
    args = parser.parse_args(argv)
    if args.generate and not (args.topics_to_move_json_file and args.broker_list):
        parser.error("--generate needs --topics-to-move-json-file and --broker-list")
    if not args.generate and not args.reassignment_json_file:
        parser.error("--execute, --verify and --cancel need --reassignment-json-file")
    if args.throttle is not None and (not args.execute or args.throttle < 1):
        parser.error("--throttle goes with --execute and is a positive number of bytes per second")
    return args


async def run(args: argparse.Namespace) -> int:
    cluster = Cluster(args.bootstrap_server, args.timeout, command_security(args.command_config))
    try:
        if args.generate:
            return await generate(cluster, args.topics_to_move_json_file, args.broker_list)
        if args.execute:
            return await execute(cluster, args.reassignment_json_file, args.throttle)
        if args.verify:
            return await verify(cluster, args.reassignment_json_file, max(0.0, args.wait))
        return await cancel(cluster, args.reassignment_json_file)
    finally:
        await cluster.close()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except (ToolError, ConfigException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ConnectionError, TimeoutError, OSError) as e:
        print(f"error: cannot reach the cluster: {e!r}", file=sys.stderr)
        return 2
