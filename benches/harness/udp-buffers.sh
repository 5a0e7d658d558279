#!/usr/bin/env bash
# Queries lost below capacity, and CPU per answered query (issue 27).
#
# Servers, all on 127.0.0.1 and pinned to core 0 (dnsperf on core 1):
#   podns      this tree's release build (or BIN), --udp-sockets 1
#   before     podns at BEFORE (default ee4d0d0, the commit before the socket
#              buffers), built here from `git archive` (or BEFORE_BIN)
#   nsd, knot  serving the same names from `podns zonefile` (one UDP
#              worker each, as benches/harness/run-all.sh)
#   echo       the floor: a few lines of C carried below that send each
#              datagram back with the QR bit set, two threads on SO_REUSEPORT
#              sockets (what loopback and the kernel cost)
# over `podns sim` with JOBS x 1,000 ranks (20 -> 20k pods) and the query
# mix of run-all.sh (90% per-rank A, 5% a 64-address headless set, 5%
# NXDOMAIN). The machine's sysctls are left as they are (recorded).
#
#   1. max rate: dnsperf unpaced, podns and before alternating, ROUNDS
#      rounds; podns's maximum is the median of its rounds (or MAX_QPS).
#   2. fixed rates: dnsperf -Q at 25%, 50% and 75% of that maximum, every
#      server at every rate, ROUNDS rounds. Per run: queries sent, answered
#      and lost (dnsperf: no answer within 5 s), the server's CPU (utime +
#      stime of its process tree from /proc/PID/stat, before and after) per
#      1,000 answered queries, the drops the kernel counted on the server's
#      sockets (/proc/net/udp `drops`; podns also exports them as
#      podns_udp_receive_dropped_total, recorded beside), and the load
#      average.
#
# Output: benches/harness/results/udp-buffers-<commit>.csv (the commit of
# this tree) and a summary table on stdout.
# Run:   benches/harness/udp-buffers.sh                 (about 15 minutes)
# Knobs: DUR (dnsperf seconds per run, 10), ROUNDS (3), JOBS (20),
#        BIN, BEFORE, BEFORE_BIN, MAX_QPS (skip stage 1's estimate),
#        SERVERS (which of "podns before nsd knot echo" to run), PCTS
#        ("25 50 75"). A focused CPU comparison on a busy machine:
#        SERVERS="podns echo" PCTS=25 ROUNDS=9 DUR=5 MAX_QPS=52000: many
#        short alternating rounds, compared round by round (the summary's
#        "paired" column: the median of each round's ratio to echo).
# Every load loop is bounded: dnsperf -l, fixed rounds. Pod IPs are data.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/harness/common.sh # RES, log, loadavg, start_work, start_sim_in, wait_readyz
DUR=${DUR:-10}
ROUNDS=${ROUNDS:-3}
SERVERS=${SERVERS:-podns before nsd knot echo}
PCTS=${PCTS:-25 50 75}
serving() { [[ " $SERVERS " == *" $1 "* ]]; }
JOBS=${JOBS:-20}
BIN=${BIN:-target/release/podns}
BEFORE=${BEFORE:-ee4d0d0}
ZONE=cluster.local
P_PODNS=15453 P_BEFORE=15454 P_NSD=15455 P_KNOT=15456 P_ECHO=15457
A_PODNS=19253 A_BEFORE=19254


# --- tools ---------------------------------------------------------------
. benches/harness/servers.sh # need_tools, cpu_ticks, descendants, start_nsd, start_knot
need_tools dnsperf:dnsperf nsd:nsd knotd:knot curl:curl cc:gcc taskset:util-linux python3:python3
export PATH=$PATH:/usr/sbin

commit=$(git rev-parse --short HEAD)
[[ -z $(git status --porcelain -- crates src Cargo.toml Cargo.lock) ]] || commit=$commit-dirty
if [[ $BIN == target/release/podns ]]; then
  log "building release ($commit)"
  cargo build --release --locked --bin podns 2>&1 | tail -1 >&2
fi

start_work udpbuf

if serving before && [[ -z ${BEFORE_BIN:-} ]]; then
  log "building podns at $BEFORE (target/bench-before)"
  mkdir -p "$work/before-src"
  git archive "$BEFORE" | tar -x -C "$work/before-src"
  (cd "$work/before-src" && CARGO_TARGET_DIR=$OLDPWD/target/bench-before \
    cargo build --release --locked --bin podns 2>&1 | tail -1 >&2)
  BEFORE_BIN=target/bench-before/release/podns
fi

HZ=$(getconf CLK_TCK)
# Datagrams the kernel dropped on the UDP sockets bound to a local port
# (the last column of /proc/net/udp, summed over SO_REUSEPORT sockets).
udp_drops() {
  awk -v p="$(printf ':%04X' "$1")" '$2 ~ p"$" {d += $NF} END {print d + 0}' /proc/net/udp
}
podns_dropped() { # admin port -> podns_udp_receive_dropped_total, or -
  curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk '/^podns_udp_receive_dropped_total / {print $2; f=1} END {if (!f) print "-"}'
}

# --- the floor: a trivial responder --------------------------------------
cat >"$work/echo.c" <<'C'
/* Answers every datagram with itself, QR bit set: two threads, each on
   its own SO_REUSEPORT socket on 127.0.0.1:PORT, one recvfrom and one
   sendto per datagram. */
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
static int port;
static void *serve(void *unused) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (bind(s, (struct sockaddr *)&a, sizeof a)) { perror("bind"); exit(1); }
  for (;;) {
    unsigned char b[4096];
    struct sockaddr_storage from;
    socklen_t len = sizeof from;
    ssize_t n = recvfrom(s, b, sizeof b, 0, (struct sockaddr *)&from, &len);
    if (n < 3) continue;
    b[2] |= 0x80;
    sendto(s, b, n, 0, (struct sockaddr *)&from, len);
  }
  return unused;
}
int main(int argc, char **argv) {
  pthread_t t;
  port = argc > 1 ? atoi(argv[1]) : 15457;
  pthread_create(&t, 0, serve, 0);
  serve(0);
}
C
cc -O2 -pthread -o "$work/echo" "$work/echo.c"

# --- cluster, zone, servers ----------------------------------------------
log "simulator: $JOBS x 1000 pods"
mkdir -p "$work/sim"
start_sim_in "$work/sim" 600 --jobs "$JOBS" --ranks 1000 --pod-cidr 10.0.0.0/12
curl -fsS -X POST -H 'content-type: application/json' \
  -d '{"namespace":"default","name":"gang64","ranks":64}' "$api/sim/jobs" >/dev/null
sleep 3
zones=$work/zones
"$BIN" zonefile --kubeconfig "$kubeconfig" --ns-address 127.0.0.1 --out-dir "$zones"
python3 benches/harness/queries.py "$work/queries.txt" "$JOBS"

start_podns() { # bin port admin log
  taskset -c 0 "$1" serve --kubeconfig "$kubeconfig" --dns-listen "127.0.0.1:$2" \
    --admin-listen "127.0.0.1:$3" --udp-sockets 1 --ns-address 127.0.0.1 >"$4" 2>&1 &
  pids+=("$!")
}
start_podns "$BIN" $P_PODNS $A_PODNS "$work/podns.log"
podns_pid=$!
answering=($P_PODNS)
if serving before; then
  start_podns "$BEFORE_BIN" $P_BEFORE $A_BEFORE "$work/before.log"
  before_pid=$!
  answering+=($P_BEFORE)
fi
if serving nsd; then start_nsd $P_NSD "$zones" "$work/nsd" && answering+=($P_NSD); fi
if serving knot; then start_knot $P_KNOT "$zones" "$work/knot" && answering+=($P_KNOT); fi
taskset -c 0 "$work/echo" $P_ECHO &
echo_pid=$!
pids+=("$echo_pid")

probe=train-$((JOBS - 1))-999.train-$((JOBS - 1)).default.svc.cluster.local
for p in "${answering[@]}"; do
  python3 benches/harness/dnsq.py "$p" "$probe" 300 || {
    log "server on $p never answered"
    tail "$work"/*.log "$work"/nsd/* "$work"/knot/out >&2
    exit 1
  }
done
python3 - $P_ECHO <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(b"\x12\x34\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", ("127.0.0.1", int(sys.argv[1])))
assert s.recv(64)[2] & 0x80, "echo: no QR bit"
PY
log "all answer; $(grep -m1 'udp socket buffers' "$work/podns.log" | sed 's/.*udp socket buffers/podns: udp socket buffers/')"

sysctls="rmem_default=$(cat /proc/sys/net/core/rmem_default) rmem_max=$(cat /proc/sys/net/core/rmem_max) netdev_max_backlog=$(cat /proc/sys/net/core/netdev_max_backlog)"
log "sysctls: $sysctls"
csv=$RES/udp-buffers-$commit.csv
echo "stage,round,pct,rate,server,sent,completed,lost,qps,avg_latency_ms,cpu_ms,cpu_ms_per_1k_answered,socket_drops,podns_dropped_metric,loadavg" >"$csv"

run() { # stage round pct rate server
  local srv=$5 port pid admin="" q=() o=$work/dp.out
  case $srv in
    podns) port=$P_PODNS pid=$podns_pid admin=$A_PODNS ;;
    before) port=$P_BEFORE pid=$before_pid ;;
    nsd) port=$P_NSD pid=$nsd_pid ;;
    knot) port=$P_KNOT pid=$knot_pid ;;
    echo) port=$P_ECHO pid=$echo_pid ;;
  esac
  [[ $4 != max ]] && q=(-Q "$4")
  local m0=- m1=- d0 d1 c0 c1
  [[ -n $admin ]] && m0=$(podns_dropped "$admin")
  d0=$(udp_drops "$port")
  c0=$(cpu_ticks "$pid")
  taskset -c 1 dnsperf -s 127.0.0.1 -p "$port" -d "$work/queries.txt" -l "$DUR" \
    -e -q 200 "${q[@]}" >"$o" 2>&1 || true
  c1=$(cpu_ticks "$pid")
  d1=$(udp_drops "$port")
  [[ -n $admin ]] && m1=$(podns_dropped "$admin")
  local sent done_ lost qps avg cpu per1k metric=-
  sent=$(awk '/Queries sent:/ {print $3}' "$o")
  done_=$(awk '/Queries completed:/ {print $3}' "$o")
  lost=$(awk '/Queries lost:/ {print $3}' "$o")
  qps=$(awk '/Queries per second:/ {print $4}' "$o")
  avg=$(awk '/Average Latency/ {print $4 * 1000}' "$o")
  cpu=$(((c1 - c0) * 1000 / HZ))
  per1k=$(awk -v c="$cpu" -v n="${done_:-0}" 'BEGIN {printf "%.2f", n ? c * 1000 / n : 0}')
  [[ $m0 != - && $m1 != - ]] && metric=$(awk -v a="$m0" -v b="$m1" 'BEGIN {print b - a}')
  echo "$1,$2,$3,$4,$srv,$sent,$done_,$lost,$qps,$avg,$cpu,$per1k,$((d1 - d0)),$metric,$(loadavg)" | tee -a "$csv" >&2
}

# --- 1. max rate ----------------------------------------------------------
if [[ -z ${MAX_QPS:-} ]]; then
  for round in $(seq 1 "$ROUNDS"); do
    for srv in podns $(serving before && echo before); do run max "$round" 100 max "$srv"; done
  done
  MAX_QPS=$(awk -F, '$1 == "max" && $5 == "podns" {print $9}' "$csv" | sort -n |
    awk '{v[NR] = $1} END {printf "%d", v[int((NR + 1) / 2)]}')
fi
log "podns maximum: $MAX_QPS q/s"

# --- 2. fixed rates --------------------------------------------------------
for round in $(seq 1 "$ROUNDS"); do
  for pct in $PCTS; do
    rate=$((MAX_QPS * pct / 100))
    for srv in $SERVERS; do run fixed "$round" "$pct" "$rate" "$srv"; done
  done
done

# --- summary ----------------------------------------------------------------
python3 - "$csv" "$sysctls" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"# {sys.argv[1]}  ({sys.argv[2]})")
mx = [r for r in rows if r["stage"] == "max"]
for s in ("podns", "before"):
    q = [float(r["qps"]) for r in mx if r["server"] == s]
    if q:
        print(f"max rate {s}: " + " / ".join(f"{v:,.0f}" for v in q) + f" q/s (median {statistics.median(q):,.0f})")
fx = [r for r in rows if r["stage"] == "fixed"]
servers = [s for s in ("podns", "before", "nsd", "knot", "echo") if any(r["server"] == s for r in fx)]
print("| rate | server | lost per round | socket drops per round | CPU-ms / 1k answered | x echo (medians) | x echo (paired) | load |")
print("|---|---|---|---|---|---|---|---|")
for pct in ("25", "50", "75"):
    at = [r for r in fx if r["pct"] == pct]
    if not at:
        continue
    per1k = lambda r: float(r["cpu_ms_per_1k_answered"])
    echo = {r["round"]: per1k(r) for r in at if r["server"] == "echo"}
    floor = statistics.median(echo.values()) if echo else None
    for s in servers:
        rs = [r for r in at if r["server"] == s]
        cpu = [per1k(r) for r in rs]
        # Each round's ratio to the floor measured in the same round.
        paired = [per1k(r) / echo[r["round"]] for r in rs if echo.get(r["round"])]
        med = f"{statistics.median(cpu) / floor:.2f}" if floor else "-"
        pair = f"{statistics.median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f})" if paired else "-"
        print(f"| {pct}% ({rs[0]['rate']} q/s) | {s} | {' / '.join(r['lost'] for r in rs)} |"
              f" {' / '.join(r['socket_drops'] for r in rs)} |"
              f" {min(cpu):.2f}-{max(cpu):.2f} | {med} | {pair} |"
              f" {rs[0]['loadavg']}-{rs[-1]['loadavg']} |")
PY
