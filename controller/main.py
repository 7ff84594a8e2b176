"""`odradek controller --config FILE [--override key=value ...]`: one controller candidate."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from odradek.common import process_logging, zk_security
from odradek.common.bounded_exit import end_leftover_tasks
from odradek.common.config import ControllerConfig, load_properties
from odradek.common.metrics import MetricsServer, Registry
from odradek.common.security.listeners import check_listener_security

from .controller import KafkaController
from .metrics import families

log = logging.getLogger(__name__)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="odradek controller", description=__doc__)
    p.add_argument("--config", help="Kafka-style properties file (controller.id, zookeeper.connect, ...)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a property, after the file (repeatable)")
    process_logging.add_arguments(p)
    return p.parse_args(argv)


async def serve(config: ControllerConfig) -> None:
    controller = KafkaController(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop)
    server = None
    if config.metrics_port >= 0:
        registry = Registry()
        registry.register(lambda: families(controller))
        server = MetricsServer(registry, config.metrics_host, config.metrics_port, readiness=controller.readiness)
        await server.start()
        log.info("metrics on %s", server.url)
    try:
        await controller.run()
    finally:
        if server is not None:
            await server.stop()
    await end_leftover_tasks(5, log)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    process_logging.configure(args, "controller")
    try:
        config = ControllerConfig.from_properties(load_properties(args.config, args.override))
        check_listener_security(config)
        zk_security.from_config(config)  # ZooKeeper identity and TLS: a bad one fails here, in one line
    except Exception as e:  # missing keys, bad values, unreadable file: say so and exit 2
        print(f"odradek controller: bad configuration: {e}", file=sys.stderr)
        return 2
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
