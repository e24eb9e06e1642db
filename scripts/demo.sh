#!/usr/bin/env bash
# make demo: a local 3-replica shoal cluster scraping 30 demo targets and
# remote-writing to a local receiver (a real Prometheus TSDB). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

DEMO=.demo
BIN=bin
TARGETS=${DEMO_TARGETS:-30}
rm -rf "$DEMO"
mkdir -p "$DEMO"

echo "Building shoal, the receiver and the demo targets..."
make --no-print-directory build >/dev/null

pids=()        # receiver and targets
agents=()      # shoal replicas
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "Stopping the demo..."
  # Agents first, so they can flush to a receiver that is still there.
  for pid in "${agents[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${agents[@]}"; do wait "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "Stopped. Logs and data are in $DEMO/."
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# The receiver and the targets run in their own session: Ctrl-C reaches the
# whole foreground process group, and they must outlive the agents' flush.
setsid "$BIN/shoal-receiver" --web.listen-address=127.0.0.1:19291 --storage.path="$DEMO/receiver" \
  >"$DEMO/receiver.log" 2>&1 &
pids+=($!)

setsid "$BIN/shoal-loadgen" --targets="$TARGETS" --series=50 --listen-host=127.0.0.1 --base-port=19400 \
  --file-sd-out="$DEMO/targets.json" >"$DEMO/loadgen.log" 2>&1 &
pids+=($!)

cat >"$DEMO/shoal.yml" <<YML
global:
  scrape_interval: 5s
  external_labels:
    demo: shoal
scrape_configs:
  - job_name: demo
    file_sd_configs:
      - files: ['$PWD/$DEMO/targets.json']
  - job_name: shoal
    static_configs:
      - targets: ['127.0.0.1:9941', '127.0.0.1:9942', '127.0.0.1:9943']
remote_write:
  - name: local-receiver
    url: http://127.0.0.1:19291/api/v1/write
    queue_config:
      batch_send_deadline: 1s
YML

for i in 1 2 3; do
  "$BIN/shoal" --config.file="$DEMO/shoal.yml" \
    --web.listen-address="127.0.0.1:994$i" \
    --storage.path="$DEMO/shoal-$i" \
    --cluster.enabled --cluster.node-name="shoal-$i" \
    --cluster.listen-address="127.0.0.1:795$i" --cluster.advertise-address="127.0.0.1:795$i" \
    --cluster.join=127.0.0.1:7951 --cluster.join=127.0.0.1:7952 --cluster.join=127.0.0.1:7953 \
    --cluster.rejoin-interval=10s --storage.remote.flush-deadline=10s \
    >"$DEMO/shoal-$i.log" 2>&1 &
  agents+=($!)
done

for i in 1 2 3; do
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:994$i/-/ready" >/dev/null 2>&1 && break
    sleep 0.2
  done
done

cat <<MSG

shoal demo is running: 3 replicas, $TARGETS targets, 1 receiver.

  Status pages     http://127.0.0.1:9941/  http://127.0.0.1:9942/  http://127.0.0.1:9943/
  Cluster view     http://127.0.0.1:9941/cluster
  Peers (JSON)     curl -s http://127.0.0.1:9941/api/v1/cluster/peers
  Receiver         http://127.0.0.1:19291/
  Query it         curl -s 'http://127.0.0.1:19291/api/v1/query?query=count(up)'
                   curl -s 'http://127.0.0.1:19291/api/v1/query?query=sum(rate(prometheus_remote_storage_samples_total[1m]))'
  Logs             $DEMO/*.log

Try: kill one replica (kill -9 \$(pgrep -f 'node-name=shoal-2')) and watch the others take its targets.
Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}" "${agents[@]}" || true
echo "A demo process exited; see the logs in $DEMO/."
