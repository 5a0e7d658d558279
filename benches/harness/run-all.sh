#!/usr/bin/env bash
# Whole-process benchmark suite for podns (issue 5). Everything runs on
# 127.0.0.1; pod IPs are data only; every load loop is bounded (dnsperf -l,
# sample counts, deadlines).
#
# What it does, in stages (STAGES, default "dns cold prop gang plot"):
#   dns   podns sim with 100 jobs x 1,000 ranks (--pod-cidr 10.0.0.0/12) plus
#         a 64-rank job "gang64" (headless set) and a "probe" job; exports the
#         zone with `podns zonefile`; serves it from NSD and Knot and serves
#         the live cluster from `podns serve`; dnsperf at max rate and at
#         -Q 20000 / -Q 50000, servers in alternation (A B C A B C), server
#         pinned to core 0, dnsperf to core 1 (taskset). Query mix: 90%
#         per-rank A, 5% gang64 headless A (64 addresses), 5% NXDOMAIN.
#         Records QPS, latency and server CPU-seconds per 1,000 queries
#         (utime+stime of the server's process tree from /proc/PID/stat).
#         -> benches/harness/results/dnsperf.csv
#   cold  for 10k and 100k pods (COLD_SIZES in thousands; add 1000 for 1M):
#         time from process start to ready, CPU-seconds used by then (which
#         the load of a shared machine inflates less than wall time) and RSS
#         at ready, for `podns serve` (/readyz 200) and for the kube-rs
#         reflector baseline (examples/reflector.rs, full k8s_openapi Pods),
#         plus API-side requests/bytes from /sim/stats. From LEAN_FROM
#         thousand pods on (default 1000) the simulator runs with
#         --lean-pods (~2.5 KB pod bodies instead of ~7.6 KB, column pod_body)
#         and the reflector is skipped: at 1M full pods the simulator alone
#         needs ~10 GB and the reflector ~53 GB (5.3 GB at 100k).
#         -> benches/harness/results/coldstart.csv
#   prop  propagation p50/p99 from a pod IP status PATCH to podns answering
#         the new IP, at 0, 100, 1,000 pod mutations/s of /sim/churn
#         (benches/harness/propagation.py), and podns's own event -> answerable
#         histogram over the same window (in the CSV's per-rate note), which
#         separates podns from the simulator and the Python poller.
#         -> benches/harness/results/propagation.csv
#   gang  a gang restart of an 8,192-rank job (/sim/jobs/default/gang/restart):
#         time until every rank name answers a new IP, and the stale and
#         NXDOMAIN answers a client sweeping all names sees meanwhile
#         (benches/harness/gang.py). -> benches/harness/results/gang.json
#   plot  SVG figures and benches/harness/results/summary.md (benches/harness/plot.py,
#         matplotlib, pip-installed when missing).
#
# Run:   benches/harness/run-all.sh                      (about 15 minutes on 2 cores)
#        STAGES=dns DUR=5 benches/harness/run-all.sh     (one stage, shorter runs)
#        STAGES=plot benches/harness/run-all.sh          (figures from existing CSVs)
# Knobs: DUR (dnsperf seconds per run, 10), ROUNDS (alternation rounds, 2),
#        COLD_SIZES ("10 100"), COLD_ROUNDS (2), LEAN_FROM (1000),
#        PROP_SAMPLES (300),
#        DNS_JOBS (100; a smaller number for a quick smoke run),
#        BIN (a podns binary to run instead of building this tree's; for
#        before/after: STAGES=prop BIN=/tmp/before/target/release/podns).
# Needs root for apt-get only when dnsperf/nsd/knot/jq/curl/bc are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/harness/common.sh # RES, log, loadavg, start_work, start_sim_in, wait_readyz
STAGES=${STAGES:-"dns cold prop gang plot"}
DUR=${DUR:-10}
ROUNDS=${ROUNDS:-2}
COLD_SIZES=${COLD_SIZES:-"10 100"}
COLD_ROUNDS=${COLD_ROUNDS:-2}
LEAN_FROM=${LEAN_FROM:-1000}
PROP_SAMPLES=${PROP_SAMPLES:-300}
DNS_JOBS=${DNS_JOBS:-100} # jobs of 1,000 ranks for the dns stage
BIN=${BIN:-target/release/podns} # another build for a before/after run (skips the build)
REFLECTOR=target/release/examples/reflector
ZONE=cluster.local
P_PODNS=15353 P_NSD=15354 P_KNOT=15355 ADMIN=19153

has() { [[ " $STAGES " == *" $1 "* ]]; }

# --- tools ---------------------------------------------------------------
. benches/harness/servers.sh # need_tools, cpu_ticks, descendants, start_nsd, start_knot
need_tools dnsperf:dnsperf nsd:nsd knotd:knot jq:jq curl:curl bc:bc taskset:util-linux

if [[ $STAGES != plot && $BIN == target/release/podns ]]; then
  log "building release"
  cargo build --release --bin podns --example reflector 2>&1 | tail -1 >&2
fi

start_work bench
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# Start the simulator; sets sim_pid, api, kubeconfig.
start_sim() { # jobs ranks [extra sim flags...]
  local d=$work/sim-$1x$2
  mkdir -p "$d"
  local cidr=10.0.0.0/12 # 1,048,576 addresses: enough up to 1M pods
  (($1 * $2 > 1000000)) && cidr=10.0.0.0/8
  start_sim_in "$d" 900 --jobs "$1" --ranks "$2" --pod-cidr "$cidr" "${@:3}"
}
create_job() { # name ranks
  curl -fsS -X POST -H 'content-type: application/json' \
    -d "{\"namespace\":\"default\",\"name\":\"$1\",\"ranks\":$2}" "$api/sim/jobs" >/dev/null
}
# podns serve on core 0 with one UDP socket, on $P_PODNS and $ADMIN,
# against the simulator; sets podns_pid.
start_podns() { # log [extra serve flags...]
  taskset -c 0 "$BIN" serve --kubeconfig "$kubeconfig" --dns-listen 127.0.0.1:$P_PODNS \
    --admin-listen 127.0.0.1:$ADMIN --udp-sockets 1 "${@:2}" >"$1" 2>&1 &
  podns_pid=$!
  pids+=("$podns_pid")
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
HZ=$(getconf CLK_TCK)

# --- dns -----------------------------------------------------------------
if has dns; then
  log "dns: simulator $DNS_JOBS x 1000"
  start_sim "$DNS_JOBS" 1000
  create_job gang64 64
  sleep 3
  zones=$work/zones
  "$BIN" zonefile --kubeconfig "$kubeconfig" --ns-address 127.0.0.1 --out-dir "$zones"
  log "zone: $(wc -l <"$zones/$ZONE.zone") lines, $(du -h "$zones/$ZONE.zone" | cut -f1)"
  gang=$(grep -cP '^gang64\.default\.svc\t.*\tA\t' "$zones/$ZONE.zone" || true)
  log "gang64 A records in the zone: $gang"
  python3 benches/harness/queries.py "$work/queries.txt" "$DNS_JOBS"
  cp "$work/queries.txt" "$RES/queries-sample.txt.tmp"
  head -20 "$RES/queries-sample.txt.tmp" >"$RES/queries-sample.txt"
  rm "$RES/queries-sample.txt.tmp"

  # NSD's response rate limiting is off (Debian builds it in; it would drop
  # most of a benchmark). Identical configuration where it matters: one UDP socket/worker each, all
  # pinned to core 0.
  start_podns "$work/podns.log" --ns-address 127.0.0.1
  start_nsd $P_NSD "$zones" "$work/nsd"
  start_knot $P_KNOT "$zones" "$work/knot"
  probe=train-$((DNS_JOBS - 1))-999.train-$((DNS_JOBS - 1)).default.svc.cluster.local
  for p in $P_PODNS $P_NSD $P_KNOT; do
    python3 benches/harness/dnsq.py "$p" "$probe" 300 || { log "server on $p never answered"; tail "$work"/podns.log "$work"/nsd/* "$work"/knot/out >&2; exit 1; }
  done
  log "all three answer; RSS KiB podns=$(rss_kib $podns_pid) nsd=$(cpu_ticks $nsd_pid >/dev/null; for p in $(descendants $nsd_pid); do rss_kib $p; done | paste -sd+ | bc) knot=$(rss_kib $knot_pid)"
  csv=$RES/dnsperf.csv
  echo "round,rate,server,sent,completed,lost,qps,avg_latency_ms,stddev_latency_ms,max_latency_ms,noerror,nxdomain,cpu_s,cpu_s_per_1k,loadavg" >"$csv"
  for round in $(seq 1 "$ROUNDS"); do
    for rate in max 20000 50000; do
      for srv in podns nsd knot; do
        case $srv in podns) port=$P_PODNS pid=$podns_pid ;; nsd) port=$P_NSD pid=$nsd_pid ;; knot) port=$P_KNOT pid=$knot_pid ;; esac
        q=(); [[ $rate != max ]] && q=(-Q "$rate")
        c0=$(cpu_ticks "$pid")
        taskset -c 1 dnsperf -s 127.0.0.1 -p "$port" -d "$work/queries.txt" -l "$DUR" \
          -e -q 200 "${q[@]}" >"$work/dp.out" 2>&1 || true
        c1=$(cpu_ticks "$pid")
        o=$work/dp.out
        sent=$(awk '/Queries sent:/ {print $3}' "$o")
        done_=$(awk '/Queries completed:/ {print $3}' "$o")
        lost=$(awk '/Queries lost:/ {print $3}' "$o")
        qps=$(awk '/Queries per second:/ {print $4}' "$o")
        avg=$(awk '/Average Latency/ {print $4 * 1000}' "$o")
        maxl=$(awk '/Average Latency/ {gsub(/\)/,"",$8); print $8 * 1000}' "$o")
        sd=$(awk '/Latency StdDev/ {print $4 * 1000}' "$o")
        noerr=$(grep -o 'NOERROR [0-9]*' "$o" | awk '{print $2}')
        nx=$(grep -o 'NXDOMAIN [0-9]*' "$o" | awk '{print $2}')
        cpu=$(echo "scale=3; ($c1 - $c0) / $HZ" | bc)
        per1k=$(echo "scale=5; $cpu * 1000 / ${done_:-1}" | bc)
        echo "$round,$rate,$srv,$sent,$done_,$lost,$qps,$avg,$sd,$maxl,${noerr:-0},${nx:-0},$cpu,$per1k,$(loadavg)" | tee -a "$csv" >&2
      done
    done
  done
  stop "$podns_pid"; stop "$nsd_pid"; stop "$knot_pid"; stop "$sim_pid"
fi

# --- cold start and memory ------------------------------------------------
if has cold; then
  csv=$RES/coldstart.csv
  echo "pods,round,impl,ready_ms,self_reported_ms,rss_mib,requests,api_bytes,loadavg,cpu_s,pod_body" >"$csv"
  for k in $COLD_SIZES; do
    body=full impls="podns reflector" lean=()
    if ((k >= LEAN_FROM)); then
      body=lean impls=podns lean=(--lean-pods)
      log "cold: $k x 1000 with --lean-pods; reflector skipped (~53 GB extrapolated at 1M)"
    fi
    log "cold: simulator $k x 1000 ($body pod bodies)"
    start_sim "$k" 1000 "${lean[@]}"
    for round in $(seq 1 "$COLD_ROUNDS"); do
      for impl in $impls; do
        curl -fsS -X POST "$api/sim/stats/reset" >/dev/null
        t0=$(date +%s%N)
        self=""
        if [[ $impl == podns ]]; then
          "$BIN" serve --kubeconfig "$kubeconfig" --dns-listen 127.0.0.1:$P_PODNS \
            --admin-listen 127.0.0.1:$ADMIN >"$work/cold.log" 2>&1 &
          pid=$!
          pids+=("$pid")
          wait_readyz "$pid" 1800 || { tail "$work/cold.log" >&2; exit 1; }
        else
          "$REFLECTOR" "$kubeconfig" >"$work/cold.log" 2>&1 &
          pid=$!
          pids+=("$pid")
          end=$(($(date +%s) + 900))
          until grep -q '^synced' "$work/cold.log"; do
            (($(date +%s) < end)) && kill -0 "$pid" || { tail "$work/cold.log" >&2; exit 1; }
            sleep 0.02
          done
          self=$(sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p' "$work/cold.log")
        fi
        t1=$(date +%s%N)
        cpu=$(echo "scale=2; $(cpu_ticks "$pid") / $HZ" | bc)
        sleep 1 # let the process settle before reading RSS
        rss=$(echo "scale=1; $(rss_kib "$pid") / 1024" | bc)
        st=$(curl -fsS "$api/sim/stats")
        req=$(jq '[.requests | .. | numbers] | add' <<<"$st") # incl. this /sim/stats read
        bytes=$(jq '.bytes_sent' <<<"$st")
        stop "$pid"
        echo "$((k * 1000)),$round,$impl,$(((t1 - t0) / 1000000)),$self,$rss,$req,$bytes,$(loadavg),$cpu,$body" | tee -a "$csv" >&2
      done
    done
    stop "$sim_pid"
  done
fi

# --- propagation -----------------------------------------------------------
if has prop; then
  log "prop: simulator 10 x 1000 + probe job"
  start_sim 10 1000
  create_job probe 64
  sleep 2
  start_podns "$work/prop.log"
  wait_readyz "$podns_pid" 300
  echo "# loadavg at start $(loadavg)" >&2
  taskset -c 1 python3 benches/harness/propagation.py "$api" "$P_PODNS" "$RES/propagation.csv" "$PROP_SAMPLES" \
    0,100,1000 "http://127.0.0.1:$ADMIN"
  stop "$podns_pid"; stop "$sim_pid"
fi

# --- gang restart ------------------------------------------------------------
if has gang; then
  log "gang: simulator with one 8,192-rank job"
  start_sim 0 8
  create_job gang 8192
  sleep 3
  start_podns "$work/gang.log"
  wait_readyz "$podns_pid" 300
  python3 benches/harness/dnsq.py "$P_PODNS" gang-8191.gang.default.svc.cluster.local 60
  echo "# loadavg at start $(loadavg)" >&2
  taskset -c 1 python3 benches/harness/gang.py "$api" "$P_PODNS" "$RES/gang.json" gang 8192
  stop "$podns_pid"; stop "$sim_pid"
fi

# --- plots -----------------------------------------------------------------
if has plot; then
  python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib
  {
    echo "nproc=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "mem_total_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
    echo "loadavg_at_plot=$(loadavg)"
    echo "dnsperf=$(dnsperf -h 2>&1 | grep -m1 -i 'version' || true)"
    echo "nsd=$(nsd -v 2>&1 | head -1)"
    echo "knot=$(knotd -V 2>&1 | head -1)"
  } >"$RES/machine.txt"
  python3 benches/harness/plot.py "$RES"
  log "wrote $RES/*.svg and $RES/summary.md"
fi
