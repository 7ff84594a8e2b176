"""Server-side apply through the operator's client (kubernetes_asyncio) against the emulated API
server: what the emulator promises (tests/operator/kube_emulator.py) and what `apply` builds on it,
including the one-time migration of objects an operator before server-side apply wrote."""

import json

import kmock
import kopf
import pytest
import pytest_asyncio
from operator_harness import NS, changes, new_server

from odradek.operator.apply import FIELD_MANAGER, LAST_APPLIED, apply
from odradek.operator.kube import ApiError, KubeClient

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]
CM = "v1/configmaps"


def config_map(data: dict, annotations: dict | None = None) -> dict:
    meta = {"name": "cm", "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


class Env:
    def __init__(self, server, url):
        self.server = server
        self.client = KubeClient.from_connection(kopf.ConnectionInfo(server=url, insecure=True))

    def live(self):
        return self.server.live(CM, NS, "cm")

    def managers(self):
        return sorted((e["manager"], e["operation"]) for e in self.live()["metadata"].get("managedFields", []))


@pytest_asyncio.fixture
async def env():
    server = new_server()
    async with server, kmock.Server(server) as http:
        e = Env(server, str(http.url))
        try:
            yield e
        finally:
            await e.client.close()


async def test_apply_creates_sets_removes_what_it_dropped_and_a_repeat_writes_nothing(env):
    assert await apply(env.client, config_map({"a": "1", "b": "2"})) == "created"
    assert env.managers() == [(FIELD_MANAGER, "Apply")]
    version = env.live()["metadata"]["resourceVersion"]
    mark = len(list(env.server))
    assert await apply(env.client, config_map({"a": "1", "b": "2"})) == "unchanged"
    assert env.live()["metadata"]["resourceVersion"] == version and changes(env.server, mark) == []

    assert await apply(env.client, config_map({"a": "3"})) == "patched"
    assert env.live()["data"] == {"a": "3"}, "b was applied before and is not now: removed"


async def test_fields_of_other_managers_stay_and_conflicts_need_force(env):
    await apply(env.client, config_map({"a": "1"}))
    await env.client.patch("ConfigMap", NS, "cm", {"data": {"theirs": "x", "a": "9"}}, field_manager="kubectl-edit")
    with pytest.raises(ApiError) as refused:
        await env.client.apply(config_map({"a": "1"}), FIELD_MANAGER, force=False)
    assert refused.value.status == 409 and "kubectl-edit" in refused.value.message
    await apply(env.client, config_map({"a": "1"}))  # forced: the operator's rendering wins
    assert env.live()["data"] == {"a": "1", "theirs": "x"}, "a field the operator never applied is left alone"
    await apply(env.client, config_map({"b": "2"}))
    assert env.live()["data"] == {"b": "2", "theirs": "x"}


async def test_an_apply_without_a_field_manager_is_refused(env):
    with pytest.raises(ApiError) as refused:
        await env.client._call("ConfigMap", "patch", NS, "cm", config_map({"a": "1"}),
                               _content_type="application/apply-patch+yaml")
    assert refused.value.status == 400


async def test_an_object_written_before_server_side_apply_is_migrated_once(env):
    """It carries LAST_APPLIED and is owned by the old client's writes ("Python", Update): the
    migration removes the field no longer rendered and the annotation, and drops that ownership,
    so that a field dropped later is removed by apply alone."""
    rendered_then = {"data": {"a": "1", "old": "x"}, "metadata": {}}
    old = config_map({"a": "1", "old": "x", "b": "2"}, annotations={LAST_APPLIED: json.dumps(rendered_then)})
    old["metadata"]["managedFields"] = [{
        "manager": "Python", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:a": {}, "f:old": {}}, "f:metadata": {"f:annotations": {f"f:{LAST_APPLIED}": {}}}}}, {
        "manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:b": {}}}}]
    env.server.put_raw(CM, NS, old)

    assert await apply(env.client, config_map({"a": "1", "c": "3"})) == "migrated"
    live = env.live()
    assert live["data"] == {"a": "1", "b": "2", "c": "3"}, "old removed; kubectl's b kept"
    assert LAST_APPLIED not in (live["metadata"].get("annotations") or {})
    assert env.managers() == [("kubectl-edit", "Update"), (FIELD_MANAGER, "Apply")]

    assert await apply(env.client, config_map({"c": "3"})) == "patched"
    assert env.live()["data"] == {"b": "2", "c": "3"}, "a field dropped after the migration goes by apply"
    assert await apply(env.client, config_map({"c": "3"})) == "unchanged"
