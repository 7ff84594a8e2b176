#!/usr/bin/env bash
# End to end on kind: build and load the image, install the chart with a cluster, wait for Ready,
# produce and consume inside the cluster, a dynamic config change (no roll), roll the brokers with
# a static one (data still there), scale 3→4 brokers (partitions spread onto the new one) and back
# to 3 (drained first), a Topic from values (kubectl wait for Ready, then its partitions through
# kcat), tear down; then a secured cluster (SASL_SSL listener, ACLs) with a Topic and a KafkaUser
# from values, used by a client holding the user's Secret and the cluster CA, and torn down.
# On any failure it prints the KafkaCluster, pods, events and the operator's and brokers' logs.
# Needs docker, kind, kubectl and helm on PATH. Not yet run anywhere (no Docker engine where it
# was written).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "e2e: '$tool' is not installed; this test needs docker, kind, kubectl and helm" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "e2e: no Docker engine is reachable (docker info failed)" >&2; exit 2; }

CLUSTER=${CLUSTER:-odradek-e2e}
NS=kafka
IMAGE=odradek:e2e
KCAT_IMAGE=${KCAT_IMAGE:-edenhill/kcat:1.7.1}
cleanup() { kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; }
dump() {
  echo "e2e: FAILED; the cluster as it is:" >&2
  kubectl -n "$NS" get kafkacluster kafka -o yaml >&2 || true
  kubectl -n "$NS" get pods,statefulsets,pvc -o wide >&2 || true
  kubectl -n "$NS" get events --sort-by=.lastTimestamp >&2 || true
  kubectl -n "$NS" logs deployment/odradek-operator --tail=200 >&2 || true
  for pod in $(kubectl -n "$NS" get pods -l app.kubernetes.io/component=broker -o name 2>/dev/null); do
    kubectl -n "$NS" logs "$pod" --tail=50 >&2 || true
  done
}
fail() { echo "e2e: $*" >&2; exit 1; }  # the EXIT trap dumps the cluster
trap 'code=$?; [ $code -ne 0 ] && [ $code -ne 2 ] && dump; cleanup' EXIT
# Every pod run here prints only its own output (--quiet: no 'pod "x" deleted' line).
krun() { local name=$1; shift; kubectl -n "$NS" run "$name" --rm -i --quiet --restart=Never --image="$KCAT_IMAGE" --command -- "$@"; }
consume_all() { krun "e2e-consume-$RANDOM" kcat -C -b "$BOOTSTRAP" -t e2e -o beginning -e -c 100 -q | sort -n | tr '\n' ' '; }
wait_ready() {  # the Ready condition for the current generation, then every pod Ready
  kubectl -n "$NS" wait kafkacluster/kafka --for=condition=Ready --timeout="${1:-600s}"
}

kind create cluster --name "$CLUSTER" --wait 120s
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

helm install odradek helm/odradek --namespace "$NS" --create-namespace --wait \
  --set image.repository=odradek --set image.tag=e2e \
  --set cluster.enabled=true --set cluster.brokers=3 --set cluster.storage.size=1Gi
wait_ready

BOOTSTRAP=kafka-bootstrap.$NS.svc:9092
krun e2e-produce sh -c "seq 100 | kcat -P -b $BOOTSTRAP -t e2e -X acks=all"
want=$(seq 100 | tr '\n' ' ')
got=$(consume_all)
[ "$got" = "$want" ] || fail "consumed records differ: $got"
echo "e2e: produced and consumed 100 records"

# A dynamic config change (log.retention.ms) is applied live: no roll.
hash() { kubectl -n "$NS" get statefulset kafka-broker -o jsonpath='{.spec.template.metadata.annotations.odradek\.io/config-hash}'; }
before=$(hash)
helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values --set 'cluster.config.log\.retention\.ms=86400000'
sleep 30
[ "$(hash)" = "$before" ] || fail "a dynamic config change rolled the brokers"
echo "e2e: log.retention.ms applied without a roll"

# A static config change (num.partitions) rolls every broker, one at a time; the data stays readable.
helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values --set 'cluster.config.num\.partitions=2'
after=$before
for _ in $(seq 30); do after=$(hash); [ "$after" != "$before" ] && break; sleep 2; done
[ "$after" != "$before" ] || fail "the config change did not reach the broker template"
rolled=0
for _ in $(seq 90); do
  rolled=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=broker \
    -o jsonpath='{range .items[*]}{.metadata.annotations.odradek\.io/config-hash}{"\n"}{end}' | grep -c "^$after$" || true)
  [ "$rolled" = 3 ] && break
  sleep 10
done
[ "$rolled" = 3 ] || fail "roll did not finish: $rolled of 3 brokers on the new config"
wait_ready
got=$(consume_all)
[ "$got" = "$want" ] || fail "records differ after the roll: $got"
echo "e2e: rolled 3 brokers, data intact"

# Scale up: a fourth broker, and partitions spread onto it.
helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values --set cluster.brokers=4
ready=0
for _ in $(seq 60); do
  ready=$(kubectl -n "$NS" get kafkacluster kafka -o jsonpath='{.status.brokers.ready}')
  [ "$ready" = 4 ] && break
  sleep 10
done
[ "$ready" = 4 ] || fail "scale to 4 brokers did not finish (ready=$ready)"
wait_ready
on_new=0
for _ in $(seq 30); do
  on_new=$(krun "e2e-metadata-$RANDOM" kcat -L -b "$BOOTSTRAP" | grep -cE 'replicas: ([0-9]+,)*3(,|$|:)' || true)
  [ "$on_new" -gt 0 ] && break
  sleep 10
done
[ "$on_new" -gt 0 ] || fail "no partition has a replica on the new broker 3"
echo "e2e: 4 brokers, $on_new partitions with a replica on the new one"

# Scale down: broker 3 is drained first, then removed; nothing is lost.
helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values --set cluster.brokers=3
replicas=4
for _ in $(seq 60); do
  replicas=$(kubectl -n "$NS" get statefulset kafka-broker -o jsonpath='{.spec.replicas}')
  [ "$replicas" = 3 ] && break
  sleep 10
done
[ "$replicas" = 3 ] || fail "scale down to 3 brokers did not finish"
wait_ready
got=$(consume_all)
[ "$got" = "$want" ] || fail "records differ after the scale-down: $got"
echo "e2e: back to 3 brokers, data intact"

# A Topic from values: Ready through kubectl wait, then visible to a Kafka client.
helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values \
  --set 'topics[0].name=e2e-orders' --set 'topics[0].partitions=6' --set 'topics[0].replicas=3'
kubectl -n "$NS" wait topic/e2e-orders --for=condition=Ready --timeout=300s
partitions=$(krun e2e-metadata kcat -L -b "$BOOTSTRAP" -t e2e-orders | grep -c 'partition [0-9]')
[ "$partitions" = 6 ] || fail "topic e2e-orders has $partitions partitions, 6 wanted"

# Uninstall leaves nothing Terminating (the KafkaCluster has no finalizer; a Topic's finalizer
# needs the operator, so the Topic goes first, while the operator runs).
kubectl -n "$NS" delete topic e2e-orders --wait --timeout=120s
helm uninstall odradek --namespace "$NS" --wait
for _ in $(seq 30); do
  left=$(kubectl -n "$NS" get kafkaclusters -o name 2>/dev/null | wc -l)
  [ "$left" = 0 ] && break
  sleep 2
done
[ "$left" = 0 ] || fail "KafkaCluster still present after helm uninstall"

# A secured cluster: a SASL_SSL (SCRAM-SHA-512) listener, the ACL authorizer, a Topic and a
# KafkaUser from values; a client with the user's Secret and the cluster CA produces and consumes,
# and is refused a topic its ACLs do not name.
helm install odradek helm/odradek --namespace "$NS" --wait \
  --set image.repository=odradek --set image.tag=e2e \
  --set cluster.enabled=true --set cluster.brokers=3 --set cluster.storage.size=1Gi \
  --set-json 'cluster.listeners=[{"name":"tls","port":9093,"type":"internal","tls":true,"authentication":{"type":"scram-sha-512"}}]' \
  --set-json 'cluster.authorization={"type":"simple"}' \
  --set-json 'topics=[{"name":"e2e-secure","partitions":3,"replicas":3}]' \
  --set-json 'users=[{"name":"e2e-app","authentication":{"type":"scram-sha-512"},"authorization":{"type":"simple","acls":[{"resource":{"type":"topic","name":"e2e-secure"},"operations":["Read","Write","Describe"]}]}}]'
wait_ready
kubectl -n "$NS" wait topic/e2e-secure --for=condition=Ready --timeout=300s
kubectl -n "$NS" wait kafkauser/e2e-app --for=condition=Ready --timeout=300s
# The client runs in a pod with the cluster CA and the user's Secret mounted; its script comes on
# stdin and reads the password from the mounted file, so it never appears in a command line.
ksecure() {
  local name=$1
  kubectl -n "$NS" run "$name" --rm -i --quiet --restart=Never --image="$KCAT_IMAGE" --overrides='{
    "spec": {"volumes": [{"name": "ca", "secret": {"secretName": "kafka-cluster-ca-cert"}},
                         {"name": "user", "secret": {"secretName": "e2e-app"}}],
             "containers": [{"name": "'"$name"'", "image": "'"$KCAT_IMAGE"'", "stdin": true, "stdinOnce": true,
                             "command": ["sh", "-s"],
                             "volumeMounts": [{"name": "ca", "mountPath": "/ca"}, {"name": "user", "mountPath": "/user"}]}]}}'
}
SECURE=kafka-bootstrap.$NS.svc:9093
client_config='{ echo security.protocol=SASL_SSL; echo sasl.mechanisms=SCRAM-SHA-512; echo sasl.username=e2e-app;
  echo ssl.ca.location=/ca/ca.crt; printf "sasl.password=%s\n" "$(cat /user/password)"; } > /tmp/client.config'
printf '%s\nseq 100 | kcat -F /tmp/client.config -P -b %s -t e2e-secure -X acks=all\n' "$client_config" "$SECURE" \
  | ksecure e2e-secure-produce
got=$(printf '%s\nkcat -F /tmp/client.config -C -b %s -t e2e-secure -o beginning -e -q\n' "$client_config" "$SECURE" \
  | ksecure e2e-secure-consume | sort -n | tr '\n' ' ')
[ "$got" = "$want" ] || fail "secured cluster: consumed records differ: $got"
refused=$(printf '%s\nseq 1 | kcat -F /tmp/client.config -P -b %s -t e2e-other -X acks=all -X message.timeout.ms=20000 2>&1\n' \
  "$client_config" "$SECURE" | ksecure e2e-secure-refused || true)
echo "$refused" | grep -qi "authoriz" || fail "secured cluster: a write outside the user's ACLs was not refused: $refused"
echo "e2e: KafkaUser e2e-app produced and consumed over SASL_SSL and was refused another topic"
kubectl -n "$NS" delete kafkauser e2e-app --wait --timeout=120s
kubectl -n "$NS" delete topic e2e-secure --wait --timeout=120s
helm uninstall odradek --namespace "$NS" --wait
echo "e2e: passed"
