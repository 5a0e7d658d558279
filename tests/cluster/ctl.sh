#!/usr/bin/env bash
# Faults on a cluster that tests/cluster/up.sh DIR started:
#
#   tests/cluster/ctl.sh DIR stop-apiserver     SIGTERM kube-apiserver, wait until gone
#   tests/cluster/ctl.sh DIR start-apiserver    start it again with the same flags, wait for /readyz
#   tests/cluster/ctl.sh DIR start-apiserver-without-watch-cache
#                                               the same with --watch-cache=false: every watch is an
#                                               etcd watch, so one from a compacted revision gets a
#                                               real 410 (with its cache, kube-apiserver 1.34 resumes
#                                               such a watch from the cache it rebuilt at start)
#   tests/cluster/ctl.sh DIR compact            write a marker key to etcd (outside /registry), then
#                                               compact to that revision: every resourceVersion any
#                                               object or watcher holds is older, so gone (a watch
#                                               from one that etcd must serve gets 410)
#   tests/cluster/ctl.sh DIR revision           print etcd's current revision
#
# DIR/env keeps the new pid, so tests/cluster/down.sh still stops exactly
# what runs.
set -euo pipefail
[[ $# -eq 2 && -f "$1/env" ]] || { echo "usage: tests/cluster/ctl.sh DIR stop-apiserver|start-apiserver|start-apiserver-without-watch-cache|compact|revision" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
# shellcheck disable=SC1091
. "$dir/env"

revision() {
  # etcd's JSON gateway: a range over one key returns the store's revision.
  curl -sf -X POST "$ETCD_URL/v3/kv/range" -d '{"key":"AA=="}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])'
}

case "$2" in
  stop-apiserver)
    kill -TERM "$APISERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 200); do
      [[ "$(awk '{print $3}' "/proc/$APISERVER_PID/stat" 2>/dev/null || echo gone)" =~ ^(gone|Z)$ ]] && exit 0
      sleep 0.1
    done
    kill -KILL "$APISERVER_PID" 2>/dev/null || true
    ;;
  start-apiserver | start-apiserver-without-watch-cache)
    extra=()
    [[ "$2" == start-apiserver-without-watch-cache ]] && extra=(--watch-cache=false)
    # shellcheck disable=SC2046
    setsid "$CLUSTER_BIN/kube-apiserver" $(cat "$dir/apiserver.args") "${extra[@]}" >>"$dir/logs/apiserver.log" 2>&1 </dev/null &
    pid=$!
    sed -i "s/^APISERVER_PID=.*/APISERVER_PID=$pid/" "$dir/env"
    ready=0
    for _ in $(seq 1 600); do
      "$KUBECTL" --kubeconfig "$KUBECONFIG" get --raw /readyz >/dev/null 2>&1 && { ready=1; break; }
      sleep 0.2
    done
    ((ready)) || { echo "tests/cluster/ctl.sh: kube-apiserver not ready 120 s after start (log: $dir/logs/apiserver.log)" >&2; exit 1; }
    # kube-controller-manager and kube-scheduler did not all pick their
    # watches back up after the API server restarted here (new namespaces
    # got no default ServiceAccount for minutes): restart each with its own
    # command line, as a node's static-pod kubelet would after a
    # control-plane upgrade. Not kwok: its pod IP pools live in memory, and
    # a restarted kwok hands out addresses live pods still hold.
    for var in CONTROLLER_MANAGER_PID SCHEDULER_PID; do
      old="${!var}"
      [[ -r "/proc/$old/cmdline" ]] || continue
      mapfile -d '' argv <"/proc/$old/cmdline"
      log="$dir/logs/$(echo "${var%_PID}" | tr 'A-Z_' 'a-z-').log"
      kill -TERM "$old" 2>/dev/null || true
      while [[ -e "/proc/$old" && "$(awk '{print $3}' "/proc/$old/stat" 2>/dev/null)" != Z ]]; do sleep 0.1; done
      setsid "${argv[@]}" >>"$log" 2>&1 </dev/null &
      sed -i "s/^$var=.*/$var=$!/" "$dir/env"
      # Back only once it is healthy again: its secure port answers /healthz.
      url=""
      for ((i = 0; i < ${#argv[@]}; i++)); do
        case "${argv[i]}" in
          --secure-port) url="https://127.0.0.1:${argv[i + 1]}/healthz" ;;
        esac
      done
      for _ in $(seq 1 300); do
        [[ -z "$url" ]] || curl -skf "$url" >/dev/null 2>&1 && break
        sleep 0.2
      done
    done
    "$KUBECTL" --kubeconfig "$KUBECONFIG" wait --for=condition=Ready nodes -l type=kwok --timeout=60s >/dev/null
    ;;
  compact)
    # The marker moves the revision past the last object write, so even a
    # watcher that read every event up to it holds a compacted revision.
    # Written twice: a watch from revision r asks for r+1 onwards, which
    # a compaction one past the last write would still keep.
    for _ in 1 2; do
      curl -sf -X POST "$ETCD_URL/v3/kv/put" \
        -d "{\"key\":\"$(printf /podns-test/compaction-marker | base64)\",\"value\":\"$(date +%s%N | base64)\"}" >/dev/null
    done
    rev="$(revision)"
    curl -sf -X POST "$ETCD_URL/v3/kv/compaction" -d "{\"revision\": \"$rev\", \"physical\": true}" >/dev/null
    echo "$rev"
    ;;
  revision) revision ;;
  *) echo "tests/cluster/ctl.sh: unknown action '$2'" >&2; exit 2 ;;
esac
