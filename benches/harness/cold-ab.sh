#!/usr/bin/env bash
# Cold start, A/B: one `podns sim --kubelet --lean-pods` (LEAN="" for full
# pod bodies) with JOBS x 1,000 ranks (--pod-cidr 10.0.0.0/10), and
# against it each BIN in turn, ROUNDS
# times, alternating: `BIN serve` from process start until /readyz is 200
# (polled every 20 ms), its CPU-seconds to that moment (utime + stime), and
# VmRSS 1 s later, and the bytes the simulator sent it (/sim/stats), and
# VmHWM then (the peak RSS of the sync, for a memory limit). One CSV line
# per run on stdout:
#   pods_k,binary,extra_flags,ready_ms,cpu_s,rss_mib,api_bytes,loadavg,hwm_mib
#
# Run:  benches/harness/cold-ab.sh 100 OLD/podns target/release/podns
#       ROUNDS="1 2" benches/harness/cold-ab.sh 100 A B     # two rounds
#       EXTRA="--wire json" benches/harness/cold-ab.sh 100 target/release/podns
#       LEAN="" benches/harness/cold-ab.sh 100 ...   # realistic (~7.6 KB) pod bodies
#       RANKS=10 benches/harness/cold-ab.sh 1 ...      # JOBS x RANKS pods (an empty index's RSS)
# Two wires on one build, alternating against one simulator: pass wrappers
#   (`exec podns "$@" --wire json` when $1 is serve; the pid stays the same).
# An old build for A/B: git worktree add /tmp/before <commit> &&
#   (cd /tmp/before && cargo build --release) and pass /tmp/before/target/release/podns.
# The simulator is the first BIN's, or SIM's (a build with the simulator,
# when the BINs are image builds without it). Everything binds 127.0.0.1;
# pod IPs are data.
set -euo pipefail
J=$1
shift
work=$(mktemp -d /tmp/podns-cold.XXXXXX)
sim_pid=""
cleanup() { [[ -n $sim_pid ]] && kill "$sim_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# shellcheck disable=SC2086 # LEAN is a flag or nothing
"${SIM:-$1}" sim --listen 127.0.0.1:0 --kubelet ${LEAN---lean-pods} --jobs "$J" --ranks ${RANKS:-1000} \
  --pod-cidr 10.0.0.0/10 --kubeconfig-out "$work/k.yaml" >"$work/sim.log" 2>&1 &
sim_pid=$!
end=$(($(date +%s) + 900))
until grep -q "simulator ready" "$work/sim.log"; do
  (($(date +%s) < end)) && kill -0 "$sim_pid" || { cat "$work/sim.log" >&2; exit 1; }
  sleep 0.2
done
api=$(sed -n 's/.*server: *//p' "$work/k.yaml" | head -1)
HZ=$(getconf CLK_TCK)
for _ in ${ROUNDS:-1}; do
  for bin in "$@"; do
    curl -fsS -X POST "$api/sim/stats/reset" >/dev/null
    t0=$(date +%s%N)
    # shellcheck disable=SC2086 # EXTRA is a list of flags
    "$bin" serve --kubeconfig "$work/k.yaml" --dns-listen 127.0.0.1:15353 \
      --admin-listen 127.0.0.1:19153 ${EXTRA:-} >"$work/serve.log" 2>&1 &
    p=$!
    end=$(($(date +%s) + 1800))
    until curl -fsS http://127.0.0.1:19153/readyz >/dev/null 2>&1; do
      (($(date +%s) < end)) && kill -0 "$p" || { tail "$work/serve.log" >&2; exit 1; }
      sleep 0.02
    done
    t1=$(date +%s%N)
    ticks=$(awk '{print $14 + $15}' "/proc/$p/stat")
    sleep 1
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$p/status")
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$p/status")
    bytes=$(curl -fsS "$api/sim/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_sent"])')
    echo "$J,$bin,${EXTRA:-},$(((t1 - t0) / 1000000)),$(echo "scale=2; $ticks / $HZ" | bc),$((rss / 1024)),$bytes,$(cut -d' ' -f1 /proc/loadavg),$((hwm / 1024))"
    kill "$p"
    wait "$p" 2>/dev/null || true
  done
done
