#!/usr/bin/env bash
# What one podns instance costs: its RSS once /readyz is 200, and its load
# on the API server as the simulator's /sim/stats counts it (requests and
# watches at start, bytes of the initial list, watch bytes per pod
# mutation under churn). Loopback only. Prints one JSON object.
#
#   cargo build --release
#   deploy/measure.sh 10 1000      # 10 jobs × 1000 ranks = 10,000 pods
#   deploy/measure.sh 100 1000     # 100,000 pods (--pod-cidr 10.0.0.0/12)
#   SERVE_FLAGS="--streaming-list off" deploy/measure.sh 10 1000   # list + watch
set -euo pipefail
jobs=${1:-10}
ranks=${2:-1000}
churn=${3:-1000} # pod replacements for the bytes-per-mutation window
bin=${PODNS:-target/release/podns}
dir=$(mktemp -d)
sim_pid=""
serve_pid=""
cleanup() {
  [[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null || true
  [[ -n $sim_pid ]] && kill "$sim_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

deadline() { echo $(($(date +%s) + $1)); }

"$bin" sim --listen 127.0.0.1:0 --kubelet --jobs "$jobs" --ranks "$ranks" \
  --pod-cidr 10.0.0.0/12 --kubeconfig-out "$dir/k.yaml" >"$dir/sim.log" 2>&1 &
sim_pid=$!
end=$(deadline 600)
until grep -q "simulator ready" "$dir/sim.log"; do
  (($(date +%s) < end)) || { cat "$dir/sim.log" >&2; exit 1; }
  sleep 0.2
done
api=$(sed -n 's/.*server: *//p' "$dir/k.yaml" | head -1)
stats() { curl -fsS "$api/sim/stats"; }
curl -fsS -X POST "$api/sim/stats/reset" >/dev/null

start=$(date +%s.%N)
"$bin" serve --kubeconfig "$dir/k.yaml" --dns-listen 127.0.0.1:0 \
  --admin-listen 127.0.0.1:0 ${SERVE_FLAGS:-} >"$dir/serve.log" 2>&1 &
serve_pid=$!
end=$(deadline 600)
admin=""
until [[ -n $admin ]] && curl -fsS "http://$admin/readyz" >/dev/null 2>&1; do
  (($(date +%s) < end)) || { cat "$dir/serve.log" >&2; exit 1; }
  admin=$(sed -n 's/.*listening admin http //p' "$dir/serve.log" | sed 's/\x1b\[[0-9;]*m//g' | head -1)
  sleep 0.05
done
ready_s=$(echo "$(date +%s.%N) - $start" | bc)
rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$serve_pid/status")
hwm_kib=$(awk '/VmHWM/ {print $2}' "/proc/$serve_pid/status")
at_start=$(stats)

# Churn: replace pods at 200/s and count what the watch carries.
curl -fsS -X POST "$api/sim/stats/reset" >/dev/null
mut0=$(stats | jq .pod_mutations)
secs=$(echo "scale=3; $churn / 200" | bc)
curl -fsS -X POST -H 'content-type: application/json' \
  -d "{\"rate\": 200, \"seconds\": $secs}" "$api/sim/churn" >/dev/null
prev=-1
end=$(deadline 120)
while :; do
  sleep 1
  now=$(stats | jq .watch_bytes_sent)
  [[ $now == "$prev" ]] && break
  prev=$now
  (($(date +%s) < end)) || break
done
under_churn=$(stats)
rss_after_kib=$(awk '/VmRSS/ {print $2}' "/proc/$serve_pid/status")

jq -n --argjson s "$at_start" --argjson c "$under_churn" \
  --arg pods "$((jobs * ranks))" --arg mut0 "$mut0" --arg ready "$ready_s" \
  --arg rss "$rss_kib" --arg hwm "$hwm_kib" --arg rss2 "$rss_after_kib" '{
  pods: ($pods|tonumber),
  ready_seconds: ($ready|tonumber),
  rss_mib_at_ready: (($rss|tonumber) / 1024),
  peak_rss_mib_at_ready: (($hwm|tonumber) / 1024),
  rss_mib_after_churn: (($rss2|tonumber) / 1024),
  start: {requests: $s.requests, requests_total: $s.requests_total,
          open_watches: $s.open_watches, list_bytes: $s.bytes_sent,
          watch_bytes: $s.watch_bytes_sent},
  churn: {pod_mutations: ($c.pod_mutations - ($mut0|tonumber)), watch_events: $c.watch_events_sent,
          watch_bytes: $c.watch_bytes_sent,
          bytes_per_mutation: (($c.pod_mutations - ($mut0|tonumber)) as $m | if $m > 0 then ($c.watch_bytes_sent / $m | floor) else null end),
          requests: $c.requests}
}'
