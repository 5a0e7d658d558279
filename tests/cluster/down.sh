#!/usr/bin/env bash
# Stops exactly the processes tests/cluster/up.sh DIR started (the pids in
# DIR/env), the newest first, and waits until they are gone. Leaves DIR (its
# logs and certificates) in place; remove it yourself when done.
#
# A real node (up.sh --real-node) goes first: kubelet, the pods, containerd,
# kube-proxy and its rules, then mounts, cgroups, interfaces, iptables
# chains, conntrack entries and sysctls (tests/cluster/real-node.sh,
# real_node_down). It then checks each of those and exits 1, naming what
# is left, if anything is.
set -uo pipefail
[[ $# -eq 1 && -f "$1/env" ]] || { echo "usage: tests/cluster/down.sh DIR (a DIR that tests/cluster/up.sh wrote)" >&2; exit 2; }
env="$1/env"
mapfile -t pids < <(sed -n 's/^[A-Z_]*_PID=\([0-9][0-9]*\)$/\1/p' "$env" | tac)
alive() {
  # A pid counts only while it is still the process we started (not a
  # zombie, not a recycled pid of another program).
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$st" && "$st" != Z ]]
}
status=0
if grep -q '^REAL_NODE=' "$env"; then
  # shellcheck source=real-node.sh
  . "$(dirname "$0")/real-node.sh"
  # shellcheck disable=SC1090
  (. "$env"; real_node_down "$(cd "$1" && pwd)") || status=1
fi
for p in "${pids[@]}"; do
  alive "$p" && kill -TERM "$p" 2>/dev/null
done
deadline=$((SECONDS + 20))
for p in "${pids[@]}"; do
  while alive "$p" && ((SECONDS < deadline)); do sleep 0.2; done
  alive "$p" && kill -KILL "$p" 2>/dev/null
done
for p in "${pids[@]}"; do
  while alive "$p"; do sleep 0.1; done
done
exit "$status"
