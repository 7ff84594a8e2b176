"""The `odradek` command: one entry point for every process the image runs."""

import sys

COMMANDS = {
    "broker": ("odradek.broker.server", "run a broker (config file + --override key=value)"),
    "controller": ("odradek.controller.main", "run a controller candidate"),
    "operator": ("odradek.operator.main", "run the Kubernetes operator (KafkaCluster resources)"),
    "dev": ("odradek.dev.cluster", "run a local cluster: ZooKeeper, controllers, brokers"),
    "reassign": ("odradek.reassign", "move partitions between brokers (kafka-reassign-partitions.sh)"),
    "transactions": ("odradek.transactions", "list, describe and abort transactions (kafka-transactions.sh)"),
    "acls": ("odradek.acls", "add, remove and list ACLs through the admin API (kafka-acls.sh)"),
    "quotas": ("odradek.quotas", "describe and alter client quotas through the admin API (kafka-configs.sh)"),
    "users": ("odradek.users", "SCRAM credentials in ZooKeeper, before any broker runs (kafka-configs --zookeeper)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print("usage: odradek {" + ",".join(COMMANDS) + "} [options]", file=sys.stderr)
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:12} {text}", file=sys.stderr)
        return 2
    import importlib

    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
