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
