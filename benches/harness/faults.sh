#!/usr/bin/env bash
# Fault matrix under load (issue 7). Starts `podns sim --kubelet` with JOBS x
# RANKS pods and `podns serve` (release) against it, then runs
# benches/harness/faults.py: for each fault in PHASES, one after another, dnsperf at
# QPS over every pod name, /sim/churn at CHURN pod replacements/s, a checker
# asking CHECK_QPS names and keeping every answer, and the fault injected
# after PRE seconds (definitions of every column are in faults.py).
#
# Run:   benches/harness/faults.sh                         (about 6 minutes)
#        benches/harness/faults.sh recovery                (N replicas, see below)
#        PHASES="none outage" QPS=5000 benches/harness/faults.sh
# Knobs: JOBS (10), RANKS (1000), QPS (10000), CHURN (500), CHECK_QPS (1000),
#        PRE (5), POST (20), PHASES ("none drop compact outage throttle latency"),
#        OUT (benches/harness/results/faults.json).
# Output: OUT (one JSON object per phase) and a markdown table on stdout.
#
# Recovery with N replicas (issue 13): `benches/harness/faults.sh recovery`
# starts the simulator without load or churn and, for each N in REPLICAS
# ("1 4 8"), N `podns serve` replicas against it (DNS on P_DNS+i, admin on
# ADMIN+i, SERVE_FLAGS each, default "--streaming-list off" so that a relist
# shows in /sim/stats as a `list` and a resume as a `watch`), then runs
# `faults.py --recovery` (scenarios in SCENARIOS, "resume relist"; a 10 s
# outage each, OUTAGE to change) and stops them. About 1.5 minutes per N.
# Output: OUT (default benches/harness/results/faults-recovery.json) and a
# markdown table on stdout (`faults.py --recovery-table OUT` redraws it).
# Everything is on 127.0.0.1; pod IPs are data only; every loop is bounded
# (dnsperf -l, deadlines in faults.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/harness/common.sh # RES, log, start_work, start_sim_in, serve_ready, wait_readyz
JOBS=${JOBS:-10}
RANKS=${RANKS:-1000}
PHASES=${PHASES:-"none drop compact outage throttle latency"}
export QPS=${QPS:-10000} CHURN=${CHURN:-500} CHECK_QPS=${CHECK_QPS:-1000} PRE=${PRE:-5} POST=${POST:-20}
BIN=${PODNS:-target/release/podns}  # PODNS=path: use that binary, build nothing
P_DNS=${P_DNS:-15363} ADMIN=${ADMIN:-19163}

tools="curl python3"
[[ ${1:-} == recovery ]] || tools+=" dnsperf"
for t in $tools; do
  command -v "$t" >/dev/null || { echo "faults.sh: $t is needed" >&2; exit 1; }
done

if [[ -z ${PODNS:-} ]]; then
  log "building release"
  cargo build --release --bin podns 2>&1 | tail -1 >&2
fi

start_work faults

log "simulator: $JOBS jobs x $RANKS ranks"
start_sim_in "$work" 600 --jobs "$JOBS" --ranks "$RANKS"

if [[ ${1:-} == recovery ]]; then
  OUT=${OUT:-$RES/faults-recovery.json}
  rm -f "$OUT"
  read -r -a serve_flags <<<"${SERVE_FLAGS---streaming-list off}"
  for n in ${REPLICAS:-1 4 8}; do
    rpids=()
    for ((i = 0; i < n; i++)); do
      "$BIN" serve --kubeconfig "$work/k.yaml" --dns-listen 127.0.0.1:$((P_DNS + i)) \
        --admin-listen 127.0.0.1:$((ADMIN + i)) --ns-address 127.0.0.1 --udp-sockets 1 \
        "${serve_flags[@]}" >"$work/podns-$n-$i.log" 2>&1 &
      rpids+=($!)
      pids+=($!)
    done
    for ((i = 0; i < n; i++)); do
      wait_readyz "${rpids[i]}" 300 $((ADMIN + i)) || { cat "$work/podns-$n-$i.log" >&2; exit 1; }
    done
    log "$n replicas ready (${serve_flags[*]}; load average $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 benches/harness/faults.py --recovery "$api" "$n" "$P_DNS" "$ADMIN" "$OUT" "${SCENARIOS:-resume relist}"
    kill "${rpids[@]}" 2>/dev/null || true
    wait "${rpids[@]}" 2>/dev/null || true
    pids=("$sim_pid")
    log "$n replicas: $(cat "$work"/podns-"$n"-*.log | grep -c ' WARN ' || true) WARN lines (watch retries), $(cat "$work"/podns-"$n"-*.log | grep -c ' ERROR ' || true) ERROR"
  done
  python3 benches/harness/faults.py --recovery-table "$OUT"
  log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

serve_ready 300

OUT=${OUT:-$RES/faults.json}
python3 benches/harness/faults.py "$api" "$P_DNS" "$ADMIN" "$OUT" "$PHASES"
rm -f "$OUT.names"
log "podns log: $(grep -c ' WARN ' "$work/podns.log" || true) WARN, $(grep -c ' ERROR ' "$work/podns.log" || true) ERROR lines"
grep -E ' (WARN|ERROR) ' "$work/podns.log" | sed -E 's/^[^ ]+ //' | cut -c1-200 | sort | uniq -c | sort -rn | head -20 >&2 || true
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
