#!/usr/bin/env bash
# The walkthrough of docs/relay.md, on loopback: a simulated cluster, a
# forward target that also serves a relay, and one node instance that
# watches the relay. It digs one name the node instance holds and one it
# forwards, and checks from the metrics of both which was which.
#
#   docs/relay-walkthrough.sh        (podns, kubectl, dig and curl on PATH)
#
# It can run again at once: everything it starts is stopped on the way out
# (also on Ctrl-C or a failure), its files live in a directory of its own,
# and it waits for each server's /readyz, with a deadline, before it uses
# it. A port already taken (by a podns started by hand, say) ends it with
# the server's own one-line reason instead of a hang.
#
# PODNS, KUBECTL name other binaries; WALK_TIMEOUT (seconds, 30) bounds
# each wait.
set -euo pipefail
cd "$(dirname "$0")/.."
PODNS=${PODNS:-podns}
KUBECTL=${KUBECTL:-kubectl}
WAIT=${WALK_TIMEOUT:-30}

W=$(mktemp -d "${TMPDIR:-/tmp}/podns-relay-walk.XXXXXX")
PIDS=()
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  # Each server drains for its grace period on SIGTERM (5 s): stop them
  # all at once, then wait for every one, so no port outlives the script.
  if ((${#PIDS[@]})); then
    kill "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
  fi
  rm -rf "$W"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "relay walkthrough: $*" >&2
  exit 1
}

# Start a server in the background, its output in $W/NAME.log.
start() {
  local name=$1
  shift
  say "$* &"
  "$@" >"$W/$name.log" 2>&1 &
  PIDS+=($!)
}

# Poll until "$@" succeeds; fail after $WAIT seconds, or at once if the
# server NAME (the last one started) has exited, with its last log line.
poll() {
  local what=$1 name=$2
  shift 2
  local pid=${PIDS[-1]} deadline=$((SECONDS + WAIT))
  until "$@"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      fail "$name exited before $what: $(tail -n 1 "$W/$name.log")"
    fi
    ((SECONDS < deadline)) || fail "gave up waiting for $what after ${WAIT}s (log: $(tail -n 1 "$W/$name.log"))"
    sleep 0.1
  done
  echo "# waited for $what"
}

ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$1/readyz") == 200 ]]; }

# The sum of a metric's series on a server's /metrics (0 if none).
metric() {
  curl -sf "http://$1/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF } END { print s + 0 }'
}

# A command as it runs, its files under $W written so.
say() { echo "\$ ${*//$W/\$W}"; }

run() {
  say "$*"
  "$@"
}

# 1. A simulated cluster: 2 Jobs of 16 ranks in namespaces team-0 and team-1.
start sim "$PODNS" sim --listen 127.0.0.1:6443 --kubelet --jobs 2 --ranks 16 --namespaces 2 \
  --kubeconfig-out "$W/k.yaml"
poll "the simulator's kubeconfig" sim test -s "$W/k.yaml"

# 2. The node instances' account and its one permission (deploy/'s RBAC).
run "$KUBECTL" --kubeconfig "$W/k.yaml" create namespace podns
run "$KUBECTL" --kubeconfig "$W/k.yaml" apply -f deploy/overlays/daemonset/node-rbac.yaml

# 3. The forward target, serving a relay too; it writes the node instances'
#    kubeconfig once the relay serves.
start relay "$PODNS" serve --kubeconfig "$W/k.yaml" \
  --dns-listen 127.0.0.1:1053 --admin-listen 127.0.0.1:9153 \
  --relay-listen 127.0.0.1:6444 --relay-kubeconfig-out "$W/relay.yaml" \
  --relay-kubeconfig-account podns/podns-node
poll "the relay's kubeconfig for node instances" relay test -s "$W/relay.yaml"
poll "/readyz 200 from the forward target" relay ready 127.0.0.1:9153

# 4. A node instance for node gpu-node-00000, reading the relay.
start node "$PODNS" serve --node-relay-kubeconfig "$W/relay.yaml" --node gpu-node-00000 \
  --dns-listen 127.0.0.1:2053 --admin-listen 127.0.0.1:9154
# Ready once it knows its node's pods; it answers a namespace's names
# itself once that namespace's Pods, Services and Jobs are listed, which
# podns_node_scope_namespaces counts.
poll "/readyz 200 from the node instance" node ready 127.0.0.1:9154
holds() { (($(metric 127.0.0.1:9154 podns_node_scope_namespaces) >= 1)); }
poll "a namespace held by the node instance (podns_node_scope_namespaces)" node holds

# 5. The relay, read as an API server.
say "$KUBECTL --kubeconfig $W/relay.yaml get pods -A"
pods=$("$KUBECTL" --kubeconfig "$W/relay.yaml" get pods -A)
head -n 3 <<<"$pods"
echo "... ($(($(wc -l <<<"$pods") - 1)) pods)"

# 6. One name of a namespace with pods on this node, one of a namespace
#    without: held, then forwarded. Which it was, the counters say: the
#    node instance's questions sent to the relays, and the questions the
#    relay's DNS received (both count before the answer goes out).
dig_at_node() {
  local name=$1 fwd relay answer
  fwd=$(metric 127.0.0.1:9154 podns_dns_forwarded_total)
  relay=$(metric 127.0.0.1:9153 podns_dns_requests_total)
  say "dig @127.0.0.1 -p 2053 $name"
  answer=$(dig @127.0.0.1 -p 2053 +time=2 +tries=1 +noall +answer +comments "$name")
  grep -q 'status: NOERROR' <<<"$answer" || fail "$name: $answer"
  grep -v '^;' <<<"$answer" | grep -E "IN[[:space:]]+A[[:space:]]" || fail "$name: no address: $answer"
  FORWARDED=$(($(metric 127.0.0.1:9154 podns_dns_forwarded_total) - fwd))
  AT_RELAY=$(($(metric 127.0.0.1:9153 podns_dns_requests_total) - relay))
}
dig_at_node train-0-0.train-0.team-0.svc.cluster.local
((FORWARDED == 0 && AT_RELAY == 0)) ||
  fail "the held name went to the relay ($FORWARDED forwarded, $AT_RELAY received there)"
echo "# held: answered by the node instance; nothing forwarded, nothing asked of the relay"
dig_at_node train-1-0.train-1.team-1.svc.cluster.local
((FORWARDED == 1 && AT_RELAY == 1)) ||
  fail "the name of team-1 was not forwarded once ($FORWARDED forwarded, $AT_RELAY received there)"
echo "# forwarded: the node instance asked the relay's DNS once and passed its answer on"
echo "relay walkthrough: ok"
