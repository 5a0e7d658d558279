#!/usr/bin/env bash
# Soak (issue 7): DURATION seconds (default 1800) of dnsperf at QPS (20000)
# over every pod name, plus MUTATIONS pod mutations/s (200) from /sim/churn,
# against `podns serve` (release) on `podns sim --kubelet --jobs JOBS --ranks
# 1000 --pod-cidr 10.0.0.0/12` (100,000 pods). benches/harness/soak.py samples
# podns's RSS and open fds from /proc every INTERVAL seconds (10), the
# server-side answer-time histogram and a 200 q/s probe's round-trip
# percentiles per interval, and computes the least-squares slopes of RSS and
# fds. At the end: WARN/ERROR lines in podns's log and dnsperf's totals.
#
# Run:   benches/harness/soak.sh                       (30 minutes)
#        DURATION=300 benches/harness/soak.sh          (5 minutes)
#        BIN=/tmp/podns-abc benches/harness/soak.sh    (a build set aside; no cargo build)
# Output: benches/harness/results/soak-<DURATION>s.{csv,json} (+ .dnsperf.txt, .log.txt)
# Everything on 127.0.0.1; pod IPs are data only; dnsperf -l and DURATION
# bound every loop.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/harness/common.sh # RES, log, start_work, start_sim_in, serve_ready, wait_readyz
DURATION=${DURATION:-1800}
QPS=${QPS:-20000}
MUTATIONS=${MUTATIONS:-200}
INTERVAL=${INTERVAL:-10}
JOBS=${JOBS:-100}
BIN=${BIN:-}
P_DNS=${P_DNS:-15373} ADMIN=${ADMIN:-19173}
out=$RES/soak-${DURATION}s

for t in dnsperf curl python3; do
  command -v "$t" >/dev/null || { echo "soak.sh: $t is needed" >&2; exit 1; }
done
if [[ -z $BIN ]]; then
  log "building release"
  cargo build --release --bin podns 2>&1 | tail -1 >&2
  BIN=target/release/podns
fi

start_work soak

log "simulator: $JOBS jobs x 1000 ranks"
start_sim_in "$work" 900 --jobs "$JOBS" --ranks 1000 --pod-cidr 10.0.0.0/12

serve_ready 600

for ((j = 0; j < JOBS; j++)); do
  for ((i = 0; i < 1000; i++)); do echo "train-$j-$i.train-$j.default.svc.cluster.local A"; done
done | shuf --random-source=<(yes) >"$work/names.txt"
python3 benches/harness/dnsq.py "$P_DNS" "$(head -1 "$work/names.txt" | cut -d' ' -f1)" 60

# The simulator's churn rate is pod replacements/s, about 3.96 mutations each
# (benches/harness/propagation.py measured it).
rate=$(python3 -c "print($MUTATIONS / 3.96)")
m0=$(curl -fsS "$api/sim/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pod_mutations"])')
curl -fsS -X POST -H 'content-type: application/json' \
  -d "{\"rate\":$rate,\"seconds\":$DURATION}" "$api/sim/churn" >/dev/null
# (one "[Timeout]" line per lost query is dropped: the totals say how many)
dnsperf -s 127.0.0.1 -p "$P_DNS" -d "$work/names.txt" -Q "$QPS" -l "$DURATION" -c 1 -q 2000 2>&1 \
  | grep -v 'Timeout' >"$out.dnsperf.txt" &
perf_pid=$!
pids+=("$perf_pid")
python3 benches/harness/soak.py "$P_DNS" "$ADMIN" "$podns_pid" "$DURATION" "$INTERVAL" \
  "$work/names.txt" "$out" >"$out.summary.tmp"
wait "$perf_pid" || true
m1=$(curl -fsS "$api/sim/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pod_mutations"])')
warn=$(grep -c ' WARN ' "$work/podns.log" || true)
err=$(grep -c ' ERROR ' "$work/podns.log" || true)
grep -E ' (WARN|ERROR) ' "$work/podns.log" | head -50 >"$out.log.txt" || true
python3 - "$out.json" "$out.dnsperf.txt" "$warn" "$err" "$m0" "$m1" "$DURATION" <<'PY'
import json, re, sys
p, perf, warn, err, m0, m1, dur = sys.argv[1:]
s = json.load(open(p))
t = open(perf).read()
g = lambda pat: (re.search(pat, t) or [None, None])[1]
s["dnsperf"] = {"sent": g(r"Queries sent:\s+(\d+)"), "completed": g(r"Queries completed:\s+(\d+)"),
                "lost": g(r"Queries lost:\s+(\d+)"), "qps": g(r"Queries per second:\s+([\d.]+)"),
                "rcodes": g(r"Response codes:\s+(.*)"), "avg_latency_s": g(r"Average Latency \(s\):\s+(.*)")}
s["pod_mutations_per_s"] = round((int(m1) - int(m0)) / float(dur), 1)
s["log_warn_lines"], s["log_error_lines"] = int(warn), int(err)
json.dump(s, open(p, "w"), indent=1)
print(json.dumps(s, indent=1))
PY
rm -f "$out.summary.tmp"
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
