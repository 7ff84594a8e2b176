"""Process logs as operators read them: a restart logs no warning that needs no attention, and
`--log-level` and size rotation work for real broker and controller processes (what `odradek dev`
runs)."""

import logging
import re
import uuid

import pytest
from confluent_kafka.admin import NewTopic

from odradek.common import process_logging
from odradek.dev.cluster import LocalCluster, LogSettings, parse_args
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import free_ports

from .conftest import BROKER_DEFAULTS, CONTROLLER_DEFAULTS
from .kafka_helpers import admin, confluent_produce, make_records, wait_isr_full

LINE_LEVEL = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def levels(path) -> dict[str, list[str]]:
    """Log lines by level (continuation lines of tracebacks and the start-up markers left out)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text(errors="replace").splitlines():
        m = LINE_LEVEL.match(line)
        if m:
            out.setdefault(m.group(1), []).append(line)
    return out


def cluster(zookeeper, tmp_path, brokers: int, settings: LogSettings | None = None, **broker_overrides):
    return LocalCluster(tmp_path / "c", brokers=brokers, broker_ports=free_ports(brokers),
                        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
                        broker_overrides={**BROKER_DEFAULTS, **broker_overrides},
                        controller_overrides=CONTROLLER_DEFAULTS, log_settings=settings)


def test_a_cluster_restart_logs_no_warnings(zookeeper, tmp_path):
    """Both brokers stop, then start in the order that leaves the first one following leaderless
    partitions (it once warned "leader -1 is not among the live leaders" for each); topic names
    with '.' and '_' (it once warned for each). A clean restart needs no attention: no warnings."""
    c = cluster(zookeeper, tmp_path, 2, **{"default.replication.factor": 2})
    c.start()
    try:
        bs = c.bootstrap
        names = [f"restart.topic_{i}" for i in range(6)]
        client = admin(bs)  # must outlive its futures
        futures = client.create_topics([NewTopic(n, 4, 2) for n in names], operation_timeout=30)
        for f in futures.values():
            f.result(60)
        for n in names:
            wait_isr_full(bs, n, 4)
        c.broker(1).stop()
        c.broker(0).stop()  # the ISRs are {0} now, and 0 is gone: every partition is leaderless
        c.broker(1).start()
        # the controller hands broker 1 its partitions, all leaderless, before broker 0 is back
        wait_until(lambda: "now follower of -1" in c.broker(1).log_path.read_text(),
                   "broker 1 follows leaderless partitions", 60)
        c.broker(0).start()
        c.wait_ready(60)
        for n in names:
            wait_isr_full(bs, n, 4, timeout=90)
    finally:
        c.stop()
    for p in c.processes():
        found = levels(p.log_path)
        noise = found.get("WARNING", []) + found.get("ERROR", [])
        assert not noise, f"{p.name}: {len(noise)} warnings in a clean restart, e.g.\n" + "\n".join(noise[:5])


def since_last_start(path) -> dict[str, list[str]]:
    """levels() of the lines after the last start-up marker (the current run of the process)."""
    text = path.read_text(errors="replace")
    tail = path.with_name(path.name + ".tail")
    tail.write_text(text[text.rfind("\n--- ") + 1:])
    return levels(tail)


def test_log_level_and_size_rotation_of_real_processes(zookeeper, tmp_path):
    """One cluster run three times with other log options: DEBUG, WARNING, then tiny files."""
    c = cluster(zookeeper, tmp_path, 1, LogSettings(level="DEBUG"))
    client = None

    def run(topic: str, settings: LogSettings) -> None:
        nonlocal client
        for p in c.processes():
            p.log_settings = settings
        c.start()
        try:
            client = admin(c.bootstrap)  # must outlive its futures
            client.create_topics([NewTopic(topic, 8, 1)])[topic].result(30)
            confluent_produce(c.bootstrap, topic, make_records(200, topic))
        finally:
            c.stop()

    run("debug", LogSettings(level="DEBUG"))
    for p in c.processes():
        assert since_last_start(p.log_path).get("DEBUG"), f"{p.name}: no DEBUG lines at --log-level DEBUG"

    run("warning", LogSettings(level="WARNING"))
    for p in c.processes():
        found = since_last_start(p.log_path)
        assert not found.get("INFO") and not found.get("DEBUG"), f"{p.name} logged below WARNING: {found}"

    # The run's INFO lines are ~100-200 bytes and add up to ~600 bytes at least (the controller's
    # fewest: when the broker registers before the election, "broker change" is never logged). The
    # first line rotates the big file of the runs before; a limit well under 600 makes a second
    # rotation certain, one above the longest line keeps a file within it.
    tiny = LogSettings(level="INFO", max_bytes=400, backups=2)
    run("rotated", tiny)
    for p in c.processes():
        rotated = sorted(f.name for f in p.log_path.parent.glob(p.log_path.name + ".?"))
        assert rotated == [p.log_path.name + ".1", p.log_path.name + ".2"], rotated  # two backups, no more
        assert 0 < p.log_path.stat().st_size <= tiny.max_bytes  # rotated before it would outgrow the limit
        assert "Traceback" not in p.out_path.read_text()


def test_odradek_dev_passes_the_log_options_on():
    args = parse_args(["--log-level", "debug", "--log-file-max-bytes", "1000", "--log-file-backups", "3"])
    settings = LogSettings(args.log_level, args.log_file_max_bytes, args.log_file_backups)
    c = LocalCluster("/nonexistent", brokers=1, broker_ports=[1], zookeeper_connect="127.0.0.1:1/x",
                     log_settings=settings)
    for p in c.processes():
        argv = p.argv()
        assert argv[argv.index("--log-level") + 1] == "DEBUG"
        assert argv[argv.index("--log-file") + 1] == str(p.log_path)
        assert argv[argv.index("--log-file-max-bytes") + 1] == "1000"
        assert argv[argv.index("--log-file-backups") + 1] == "3"
    with pytest.raises(SystemExit):
        parse_args(["--log-level", "chatty"])


def test_process_logging_options(tmp_path):
    """The options broker, controller and operator share: a rotating file or stderr, the level."""
    import argparse

    parser = argparse.ArgumentParser()
    process_logging.add_arguments(parser)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        args = parser.parse_args(["--log-level", "warning", "--log-file", str(tmp_path / "p.log"),
                                  "--log-file-max-bytes", "200", "--log-file-backups", "1"])
        process_logging.configure(args, "proc")
        for i in range(20):
            logging.getLogger("x").warning("line %d of a log that outgrows its file", i)
        logging.getLogger("x").info("below the level")
        logging.getLogger("kazoo.client").warning("a library warning still shows")
        for h in root.handlers:
            h.flush()
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["p.log", "p.log.1"]
        text = (tmp_path / "p.log").read_text() + (tmp_path / "p.log.1").read_text()
        assert "[proc] x: line 19" in text and "below the level" not in text
        assert "a library warning still shows" in text
        with pytest.raises(SystemExit):
            parser.parse_args(["--log-level", "loud"])
        with pytest.raises(ValueError):
            process_logging.configure(parser.parse_args(["--log-file", str(tmp_path / "q.log"),
                                                         "--log-file-backups", "0"]), "proc")
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
