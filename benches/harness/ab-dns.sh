#!/usr/bin/env bash
# Two podns builds against one `podns sim` (10 jobs x 1,000 ranks), on
# 127.0.0.1: dnsperf 10 s unpaced and at 20,000 q/s, 3 rounds, each round
# alternating the builds, server on core 0 and dnsperf on core 1. For a
# before/after of a change to the DNS path, in one run on one machine:
#   benches/harness/ab-dns.sh BEFORE_BINARY AFTER_BINARY > ab.csv
# The simulator is AFTER_BINARY's `podns sim`, or SIM's (a build with the
# simulator, when the two compared are image builds without it).
# Prints CSV: qps, the server's CPU-ms per 1,000 answers, queries lost.
set -euo pipefail
[[ $# -eq 2 && -x $1 && -x $2 ]] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY" >&2; exit 64; }
before=$1 after=$2
W=$(mktemp -d); B=${SIM:-$after}
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
$B sim --listen 127.0.0.1:0 --kubelet --jobs 10 --ranks 1000 --pod-cidr 10.0.0.0/12 --kubeconfig-out $W/k.yaml > $W/sim.log 2>&1 & sim=$!
end=$(($(date +%s) + 300))
until grep -q "simulator ready" $W/sim.log; do (($(date +%s) < end)) || exit 1; sleep 0.2; done
python3 - $W/q.txt <<'PY'
import random, sys
random.seed(5); out=[]
for _ in range(200_000):
    r=random.random(); j=random.randrange(10)
    if r<0.95: out.append(f"train-{j}-{random.randrange(1000)}.train-{j}.default.svc.cluster.local A")
    else: out.append(f"train-{j}-{random.randrange(1000,100000)}.train-{j}.default.svc.cluster.local A")
open(sys.argv[1],"w").write("\n".join(out)+"\n")
PY
taskset -c 0 "$before" serve --kubeconfig $W/k.yaml --dns-listen 127.0.0.1:21053 --admin-listen 127.0.0.1:21153 --udp-sockets 1 > $W/b.log 2>&1 & pb=$!
taskset -c 0 "$after" serve --kubeconfig $W/k.yaml --dns-listen 127.0.0.1:22053 --admin-listen 127.0.0.1:22153 --udp-sockets 1 > $W/a.log 2>&1 & pa=$!
for p in 21153 22153; do end=$(($(date +%s) + 120)); until curl -fsS http://127.0.0.1:$p/readyz >/dev/null 2>&1; do (($(date +%s) < end)) || exit 1; sleep 0.1; done; done
HZ=$(getconf CLK_TCK); ticks(){ awk '{print $14+$15}' /proc/$1/stat; }
echo "round,rate,build,qps,cpu_ms_per_1k,lost,load1"
for round in 1 2 3; do for rate in max 20000; do for b in before after; do
  if [ $b = before ]; then port=21053 pid=$pb; else port=22053 pid=$pa; fi
  q=(); [ $rate != max ] && q=(-Q $rate)
  c0=$(ticks $pid); taskset -c 1 dnsperf -s 127.0.0.1 -p $port -d $W/q.txt -l 10 -q 200 "${q[@]}" > $W/dp 2>&1 || true; c1=$(ticks $pid)
  done_=$(awk '/Queries completed:/ {print $3}' $W/dp); qps=$(awk '/Queries per second:/ {print $4}' $W/dp); lost=$(awk '/Queries lost:/ {print $3}' $W/dp)
  echo "$round,$rate,$b,$qps,$(echo "scale=3; ($c1-$c0)*1000000/$HZ/$done_" | bc),$lost,$(cut -d' ' -f1 /proc/loadavg)"
done; done; done
