#!/usr/bin/env bash
# The relay's memory per node instance with all its watches open, A/B:
# one `podns sim --kubelet --lean-pods` (JOBS x RANKS pods on its nodes),
# and for each BIN in turn, ROUNDS times, alternating: a fresh relay
# (`BIN serve --relay-listen`), then two waves of N node instances
# (`BIN serve --relay-kubeconfig --node`), each on a node of its own, the
# second wave on N other nodes. A node instance counts as up once it
# holds its scope (`podns_node_scope_namespaces` >= 1); they start one
# after another and stay up until their wave is over.
#
# What a wave adds to the relay's VmRSS from its 10th node instance to its
# last, over the node instances between (KiB each):
# - wave 1, on a fresh relay: this includes what the relay makes once and
#   shares (the encoded objects, the dictionaries), and what its allocator
#   keeps of the first initial lists;
# - wave 2, after wave 1 has gone: a node instance's own cost, on a relay
#   whose allocator already has the pages that the lists come and go in.
# Run with MIMALLOC_PURGE_DELAY=0 (the default here) so that the RSS
# follows what is freed without waiting on the relay's next allocation.
#
# One CSV line per wave on stdout:
#   binary,round,wave,nodes,rss_start_kib,rss_end_kib,kib_per_node,conns,watches,loadavg
#
# Run:  benches/harness/relay-memory.sh OLD/podns target/release/podns
#       N=200 ROUNDS="1 2 3" benches/harness/relay-memory.sh A B
# The simulator is SIM's, or the first BIN's (it needs one built with the
# simulator, the default features). Everything binds 127.0.0.1; pod IPs
# are data. Every wait is bounded.
set -euo pipefail
. benches/harness/common.sh # start_work, start_sim_in
N=${N:-100}
ROUNDS=${ROUNDS:-1 2}
JOBS=${JOBS:-10}
RANKS=${RANKS:-500}
export MIMALLOC_PURGE_DELAY=${MIMALLOC_PURGE_DELAY:-0}

# wait_for FILE PATTERN: until PATTERN is in FILE (60 s at most).
wait_for() {
    for _ in $(seq 600); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "relay-memory: no \"$2\" in $1" >&2
    exit 1
}
addr() { grep -o "$2 [0-9.:]*" "$1" | head -1 | awk '{print $NF}'; }
metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
rss() { awk '/^VmRSS/{print $2}' "/proc/$1/status"; }

start_work relaymem
BIN=${SIM:-$1} start_sim_in "$work" 600 --lean-pods --jobs "$JOBS" --ranks "$RANKS"
cd "$work"
token=$(awk '/token:/{print $2; exit}' "$kubeconfig" | tr -d '"')
req=(-sf -H "Authorization: Bearer $token" -H "content-type: application/json")
# The node instances' account may read the relay, as the chart grants it.
curl "${req[@]}" -X POST "$api/apis/rbac.authorization.k8s.io/v1/clusterroles" \
    -d '{"metadata":{"name":"podns-node"},"rules":[{"apiGroups":["dns.podns.io"],"resources":["relays"],"verbs":["get"]}]}' >/dev/null
curl "${req[@]}" -X POST "$api/apis/rbac.authorization.k8s.io/v1/clusterrolebindings" \
    -d '{"metadata":{"name":"podns-node"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"podns-node"},"subjects":[{"kind":"ServiceAccount","namespace":"default","name":"podns-node"}]}' >/dev/null
mapfile -t nodes < <(curl "${req[@]}" "$api/api/v1/pods" | python3 -c '
import json, sys
seen = []
for p in json.load(sys.stdin)["items"]:
    n = p["spec"].get("nodeName")
    if n and n not in seen:
        seen.append(n)
print("\n".join(seen))')
if (( ${#nodes[@]} < 2 * N )); then
    echo "relay-memory: ${#nodes[@]} nodes with pods, 2 x $N needed" >&2
    exit 1
fi

echo "binary,round,wave,nodes,rss_start_kib,rss_end_kib,kib_per_node,conns,watches,loadavg"
for round in $ROUNDS; do
    for bin in "$@"; do
        run="$work/$round-$(basename "$(dirname "$bin")")-$RANDOM"
        mkdir -p "$run"
        "$bin" serve --dns-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --udp-sockets 1 \
            --kubeconfig "$kubeconfig" --relay-listen 127.0.0.1:0 \
            --relay-kubeconfig-out "$run/rk.yaml" 2>"$run/relay.log" &
        relay=$!
        pids+=($relay)
        wait_for "$run/relay.log" "relay kubeconfig written"
        relay_dns=$(addr "$run/relay.log" "listening dns udp")
        relay_admin=$(addr "$run/relay.log" "listening admin http")
        for wave in 1 2; do
            up=()
            for i in $(seq 0 $((N - 1))); do
                node=${nodes[$(((wave - 1) * N + i))]}
                log="$run/node-$wave-$i.log"
                "$bin" serve --dns-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --udp-sockets 1 \
                    --relay-kubeconfig="$run/rk.yaml" --node="$node" --relay-dns="$relay_dns" \
                    --shutdown-grace=0s 2>"$log" &
                up+=($!)
                pids+=($!)
                wait_for "$log" "listening admin http"
                admin=$(addr "$log" "listening admin http")
                for _ in $(seq 600); do
                    [[ $(metric "$admin" podns_node_scope_namespaces) > 0 ]] && break
                    sleep 0.1
                done
                if (( i == 9 )); then
                    sleep 3
                    start=$(rss "$relay")
                fi
            done
            sleep 3
            end=$(rss "$relay")
            conns=$(metric "$relay_admin" podns_relay_connections)
            watches=$(metric "$relay_admin" podns_relay_watches)
            per=$(python3 -c "print(f'{($end - $start) / ($N - 10):.1f}')")
            echo "$bin,$round,$wave,$N,$start,$end,$per,$conns,$watches,$(cut -d' ' -f1 /proc/loadavg)"
            kill "${up[@]}" 2>/dev/null
            wait "${up[@]}" 2>/dev/null || true
            sleep 2
        done
        kill "$relay"
        wait "$relay" 2>/dev/null || true
    done
done
