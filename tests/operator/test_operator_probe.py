"""Pod-derived ids (the probes themselves are httpGet on each process's health endpoint:
tests/test_metrics_core.py, tests/integration/test_operator_health.py)."""

from odradek.operator import probe


def test_controller_id_is_stable_and_outside_broker_ids():
    a = probe.controller_id_for("demo-controller-7f9c-abcde")
    assert a == probe.controller_id_for("demo-controller-7f9c-abcde") and a >= 1000
    assert a != probe.controller_id_for("demo-controller-7f9c-fghij")
    assert probe.ordinal("demo-broker-12") == 12


def test_main_prints_the_controller_id(capsys):
    assert probe.main(["controller-id", "--pod-name", "demo-controller-1"]) == 0
    assert capsys.readouterr().out.strip() == str(probe.controller_id_for("demo-controller-1"))


def test_zookeeper_probes_are_four_letter_words_without_a_jvm(zookeeper):
    """The ZooKeeper pod's probes run against a real server: srvr names the mode of a serving
    member, ruok answers imok; a closed port fails both (bash builtins only, no JVM started)."""
    import subprocess

    from odradek.operator.builders import zookeeper_probe

    port = int(zookeeper.connect.rsplit(":", 1)[1].split("/")[0])

    def run(command):
        return subprocess.run(command, capture_output=True, timeout=10).returncode

    assert run(zookeeper_probe("srvr", "Mode: ", port)) == 0
    assert run(zookeeper_probe("ruok", "imok", port)) == 0
    assert run(zookeeper_probe("srvr", "Mode: leader-of-nothing", port)) == 1, "only the expected answer passes"
    assert run(zookeeper_probe("ruok", "imok", 1)) != 0, "nothing listening"
