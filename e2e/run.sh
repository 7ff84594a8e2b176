#!/usr/bin/env bash
# End to end on kind: build and load the image, install the chart with a cluster, wait for Ready,
# produce and consume inside the cluster, scale 3→4 brokers with a helm upgrade, a Topic from
# values (kubectl wait for Ready, then its partitions through kcat), tear down.
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
trap cleanup EXIT

kind create cluster --name "$CLUSTER" --wait 120s
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

helm install odradek helm/odradek --namespace "$NS" --create-namespace --wait \
  --set image.repository=odradek --set image.tag=e2e \
  --set cluster.enabled=true --set cluster.brokers=3 --set cluster.storage.size=1Gi
kubectl -n "$NS" wait kafkacluster/kafka --for=condition=Ready --timeout=600s

BOOTSTRAP=kafka-bootstrap.$NS.svc:9092
kubectl -n "$NS" run e2e-produce --rm -i --restart=Never --image="$KCAT_IMAGE" --command -- \
  sh -c "seq 100 | kcat -P -b $BOOTSTRAP -t e2e -X acks=all"
got=$(kubectl -n "$NS" run e2e-consume --rm -i --restart=Never --image="$KCAT_IMAGE" --command -- \
  kcat -C -b "$BOOTSTRAP" -t e2e -o beginning -e -c 100 -q | sort -n | tr '\n' ' ')
want=$(seq 100 | tr '\n' ' ')
[ "$got" = "$want" ] || { echo "e2e: consumed records differ: $got" >&2; exit 1; }
echo "e2e: produced and consumed 100 records"

helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values --set cluster.brokers=4
ready=0
for _ in $(seq 60); do
  ready=$(kubectl -n "$NS" get kafkacluster kafka -o jsonpath='{.status.brokers.ready}')
  [ "$ready" = 4 ] && break
  sleep 10
done
[ "$ready" = 4 ] || { echo "e2e: scale to 4 brokers did not finish (ready=$ready)" >&2; exit 1; }

# A Topic from values: Ready through kubectl wait, then visible to a Kafka client.
helm upgrade odradek helm/odradek --namespace "$NS" --reuse-values \
  --set 'topics[0].name=e2e-orders' --set 'topics[0].partitions=6' --set 'topics[0].replicas=3'
kubectl -n "$NS" wait topic/e2e-orders --for=condition=Ready --timeout=300s
partitions=$(kubectl -n "$NS" run e2e-metadata --rm -i --quiet --restart=Never --image="$KCAT_IMAGE" --command -- \
  kcat -L -b "$BOOTSTRAP" -t e2e-orders | grep -c 'partition [0-9]')
[ "$partitions" = 6 ] || { echo "e2e: topic e2e-orders has $partitions partitions, 6 wanted" >&2; exit 1; }
echo "e2e: passed"
