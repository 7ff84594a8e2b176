"""The rendered ZooKeeper ensemble scales by reconfig (issue 28 item 6): a start script keeping
the dynamic configuration on the volume, a seed member list outside the pod template's hash, the
super user's digest from a Secret the render never contains."""

import subprocess
import sys

import pytest
import yaml

from odradek.operator import builders
from odradek.operator.models import parse_spec
from odradek.operator.zookeeper_reconfig import parse_config, super_digest

CLUSTER = """\
apiVersion: odradek.io/v1alpha1
kind: KafkaCluster
metadata: {name: orders, namespace: kafka}
spec:
  zookeeper: {replicas: 5}
"""


def body(spec):
    return {"metadata": {"name": "orders", "namespace": "kafka", "uid": "u"}, "spec": spec}


def objects(spec, replicas=None):
    b = body(spec)
    return {(o["kind"], o["metadata"]["name"]): o
            for o in builders.desired_objects(b, parse_spec(spec), zookeeper_replicas=replicas)}


@pytest.mark.integration  # runs `odradek operator --render` as a process
def test_render_shows_the_start_script_the_members_and_only_a_secret_reference(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    done = subprocess.run([sys.executable, "-m", "odradek.cli", "operator", "--render", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(done.stdout)}
    members = rendered[("ConfigMap", "orders-zookeeper-members")]["data"][builders.ZK_DYNAMIC_FILE]
    parsed = parse_config(members)[0]
    assert sorted(parsed) == [1, 2, 3, 4, 5]
    assert parsed[5] == "orders-zookeeper-4.orders-zookeeper-headless.kafka.svc:2888:3888:participant;0.0.0.0:2181"
    container = rendered[("StatefulSet", "orders-zookeeper")]["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][-1]
    for line in ("reconfigEnabled=true", "standaloneEnabled=false", "dynamicConfigFile=$dyn",
                 f"{builders.ZK_MEMBERS_DIR}/{builders.ZK_DYNAMIC_FILE}", "zkServer.sh start-foreground"):
        assert line in script
    assert container["env"] == [{"name": builders.ZK_SUPER_DIGEST_ENV, "valueFrom": {
        "secretKeyRef": {"name": "orders-zookeeper-admin", "key": "digest"}}}]
    # the operator makes the Secret at run time (a random password): never in the render
    assert not [k for k in rendered if k[0] == "Secret"]
    assert "superDigest=super:" not in done.stdout and "password" not in done.stdout.lower()
    env = rendered[("ConfigMap", "orders-zookeeper")]["data"]
    assert "conf" in env["ZOO_4LW_COMMANDS_WHITELIST"].split(",") and env["ZOO_ADMINSERVER_ENABLED"] == "false"


def test_the_member_list_changes_no_pod_template():
    three, five = objects({}, 3), objects({}, 5)
    assert (three[("ConfigMap", "orders-zookeeper-members")]["data"]
            != five[("ConfigMap", "orders-zookeeper-members")]["data"])
    sts3, sts5 = three[("StatefulSet", "orders-zookeeper")], five[("StatefulSet", "orders-zookeeper")]
    assert sts3["spec"]["template"] == sts5["spec"]["template"], "a scale step rolls no member"
    assert (sts3["spec"]["replicas"], sts5["spec"]["replicas"]) == (3, 5)
    # a removed member's claim goes with it: a later scale-up starts that member from the seed list
    assert sts3["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Delete"


def test_an_existing_ensemble_renders_nothing_of_this():
    found = objects({"zookeeper": {"connect": "zk:2181/x"}})
    assert not [k for k in found if "zookeeper" in k[1]]


def test_super_digest_is_zookeepers_scheme():
    # DigestAuthenticationProvider.generateDigest("super:reconfig-test-secret")
    assert super_digest("reconfig-test-secret") == "super:" + __import__("base64").b64encode(
        __import__("hashlib").sha1(b"super:reconfig-test-secret").digest()).decode()
