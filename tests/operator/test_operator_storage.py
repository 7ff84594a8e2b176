"""Volume size and class changes: decisions over the live claims (pure)."""

from decimal import Decimal

import pytest

from odradek.operator.storage import parse_quantity, plan_resize


def claim(name, size, storage_class=None):
    spec = {"resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def test_quantities():
    assert parse_quantity("10Gi") == 10 * 2**30 and parse_quantity("500M") == 500 * 10**6
    assert parse_quantity("1.5Ki") == Decimal(1536) and parse_quantity("1e3") == 1000
    assert parse_quantity("20Gi") > parse_quantity("20G")
    for bad in ("ten", "10Gb", "", "1e3E"):
        with pytest.raises(ValueError):
            parse_quantity(bad)


def test_a_quantity_beyond_decimal_range_is_malformed_not_a_crash():
    """decimal.Overflow is an ArithmeticError, not a ValueError: it escaped parse_spec (a ZooKeeper
    memory limit of 1e99999999) and every reconcile pass, with no condition."""
    from pydantic import ValidationError

    from odradek.operator.models import parse_spec

    for text in ("1e99999999", "1e999999999999999999Ki", "1.2.3"):
        with pytest.raises(ValueError):
            parse_quantity(text)
    with pytest.raises(ValidationError):
        parse_spec({"zookeeper": {"resources": {"limits": {"memory": "1e99999999"}}}})


TEMPLATE = claim("data", "10Gi")
CLAIMS = [claim(f"data-demo-broker-{i}", "10Gi", "standard") for i in range(3)]


def test_nothing_to_do_at_the_same_size():
    plan = plan_resize("10Gi", None, TEMPLATE, CLAIMS)
    assert plan.expand == () and plan.refused is None and plan.needs_class is None


def test_growth_asks_the_claims_class_then_expands_every_smaller_claim():
    ask = plan_resize("20Gi", None, TEMPLATE, CLAIMS)
    assert ask.needs_class == "standard" and ask.expand == ()
    grown = [claim("data-demo-broker-0", "20Gi", "standard"), *CLAIMS[1:]]
    plan = plan_resize("20Gi", None, TEMPLATE, grown, expandable=True)
    assert plan.expand == ("data-demo-broker-1", "data-demo-broker-2") and plan.refused is None
    refused = plan_resize("20Gi", None, TEMPLATE, CLAIMS, expandable=False)
    assert refused.refused[0] == "StorageNotExpandable" and refused.expand == ()


def test_shrinking_and_changing_the_class_are_refused():
    assert plan_resize("5Gi", None, TEMPLATE, CLAIMS).refused[0] == "StorageShrinkRefused"
    assert plan_resize("10Gi", "fast", TEMPLATE, CLAIMS).refused[0] == "StorageClassChangeRefused"
    assert plan_resize("10Gi", None, claim("data", "10Gi", "fast"), CLAIMS).refused[0] == "StorageClassChangeRefused"
