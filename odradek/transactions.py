"""`odradek transactions`: find and end stuck transactions (Kafka's kafka-transactions.sh, KIP-664).

    odradek transactions --bootstrap-server H:P --list [--state Ongoing]
    odradek transactions --bootstrap-server H:P --describe TRANSACTIONAL_ID
    odradek transactions --bootstrap-server H:P --describe-producers --topic T --partition N
    odradek transactions --bootstrap-server H:P --abort --topic T --partition N --start-offset O

--list asks every broker (ListTransactions), --describe the id's coordinator
(DescribeTransactions), --describe-producers the partition's leader (DescribeProducers); --abort
writes an ABORT marker for the producer whose open transaction starts at O on that partition
(WriteTxnMarkers to its leader), for a hanging transaction its coordinator no longer knows.
Every request is bounded by --timeout.
"""

import argparse
import asyncio
import json
import struct
import sys
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i16, i32

from odradek.common import wire
from odradek.common.config_def import ConfigException
from odradek.common.network.bootstrap import (
    AdminConnections,
    ToolError,
    add_command_config,
    command_security,
    parse_bootstrap,
    raise_for_error,
)
from odradek.common.security.channel import PLAINTEXT, ClientSecurity


class _Reader:
    """Just enough of the flexible wire format for DescribeTransactions v0, read by hand: kio's
    reader refuses the -1 start time Kafka sends for an id with no transaction."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def fixed(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def decode_describe_transactions(frame: bytes) -> list[dict[str, Any]]:
    """A DescribeTransactions v0 response frame (correlation id on) → its transaction states."""
    r = _Reader(frame)
    r.fixed(">i")  # correlation id
    r.skip_tags()
    r.fixed(">i")  # throttle time
    out = []
    for _ in range(r.uvarint() - 1):
        t: dict[str, Any] = {"error_code": r.fixed(">h"), "transactional_id": r.string(), "state": r.string(),
             "timeout_ms": r.fixed(">i"), "start_time_ms": r.fixed(">q"), "producer_id": r.fixed(">q"),
             "producer_epoch": r.fixed(">h"), "partitions": []}
        for _ in range(r.uvarint() - 1):
            topic = r.string()
            t["partitions"] += [f"{topic}-{r.fixed('>i')}" for _ in range(r.uvarint() - 1)]
            r.skip_tags()
        r.skip_tags()
        out.append(t)
    return out


class Tool(AdminConnections):
    def __init__(self, bootstrap: str, timeout_s: float, security: ClientSecurity = PLAINTEXT):
        super().__init__(parse_bootstrap(bootstrap), timeout_s, "odradek-transactions", security,
                         software_name="odradek-transactions")

    async def list_transactions(self, states: list[str]) -> list[dict[str, Any]]:
        out = []
        for broker_id, endpoint in sorted((await self.brokers()).items()):
            response = await self.send(endpoint, ListTransactionsRequest(state_filters=tuple(states),
                                                                         producer_id_filters=()))
            raise_for_error(response.error_code, None, f"broker {broker_id}")
            for t in response.transaction_states:
                out.append({"transactional_id": t.transactional_id, "producer_id": int(t.producer_id),
                            "state": t.transaction_state, "coordinator": broker_id})
        return out

    async def describe(self, transactional_id: str) -> dict[str, Any]:
        node_id, endpoint = await self.coordinator(1, transactional_id)
        request = DescribeTransactionsRequest(transactional_ids=(TransactionalId(transactional_id),))
        frame = await self.client(endpoint).send_frame(
            lambda cid: wire.encode_request(request, cid, "odradek-transactions"), "DescribeTransactions",
            self.timeout_s)
        (t,) = decode_describe_transactions(bytes(frame))
        raise_for_error(t["error_code"], None, repr(transactional_id))
        del t["error_code"]
        t["coordinator"] = node_id
        return t

    async def producers(self, topic: str, partition: int) -> list[dict[str, Any]]:
        response = await self.send(await self.leader(topic, partition), DescribeProducersRequest(
            topics=(TopicRequest(name=TopicName(topic), partition_indexes=(i32(partition),)),)))
        (p,) = response.topics[0].partitions
        raise_for_error(p.error_code, None, f"{topic}-{partition}")
        return [{"producer_id": int(s.producer_id), "producer_epoch": int(s.producer_epoch),
                 "last_sequence": int(s.last_sequence), "last_timestamp": int(s.last_timestamp),
                 "coordinator_epoch": int(s.coordinator_epoch), "current_txn_start_offset": int(s.current_txn_start_offset)}
                for s in p.active_producers]

    async def abort(self, topic: str, partition: int, start_offset: int) -> dict[str, Any]:
        match = [s for s in await self.producers(topic, partition) if s["current_txn_start_offset"] == start_offset]
        if not match:
            raise ToolError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
        s = match[0]
        marker = WritableTxnMarker(producer_id=ProducerId(s["producer_id"]), producer_epoch=i16(s["producer_epoch"]),
                                   transaction_result=False, coordinator_epoch=i32(max(0, s["coordinator_epoch"])),
                                   topics=(WritableTxnMarkerTopic(name=TopicName(topic),
                                                                  partition_indexes=(i32(partition),)),))
        response = await self.send(await self.leader(topic, partition), WriteTxnMarkersRequest(markers=(marker,)))
        code = response.markers[0].topics[0].partitions[0].error_code
        raise_for_error(code, None, f"abort of producer {s['producer_id']} at {topic}-{partition}")
        return {"aborted": s}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="odradek transactions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", metavar="TRANSACTIONAL_ID")
    action.add_argument("--describe-producers", action="store_true")
    action.add_argument("--abort", action="store_true")
    parser.add_argument("--state", action="append", default=[], help="--list: only these states")
    parser.add_argument("--topic")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--start-offset", type=int)
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per request")
    add_command_config(parser)
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> object:
    tool = Tool(args.bootstrap_server, args.timeout, command_security(args.command_config))
    try:
        if args.list:
            return await tool.list_transactions(args.state)
        if args.describe:
            return await tool.describe(args.describe)
        if args.topic is None or args.partition is None:
            raise ToolError("--topic and --partition are required")
        if args.describe_producers:
            return await tool.producers(args.topic, args.partition)
        if args.start_offset is None:
            raise ToolError("--abort needs --start-offset")
        return await tool.abort(args.topic, args.partition, args.start_offset)
    finally:
        await tool.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = asyncio.run(run(args))
    except (ToolError, ConfigException, ConnectionError, TimeoutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0
