# Sourced by the harness scripts (faults.sh, soak.sh, run-all.sh,
# udp-buffers.sh) from the repository root: the results folder RES, a log
# line, a work folder whose processes stop when the script exits, the
# simulator's start, and the waits for the simulator and for podns, each
# with a deadline.

RES=${RES:-benches/harness/results}
mkdir -p "$RES"

log() { echo "[$(date +%T)] $*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/'; }

# Sets `work` (/tmp/podns-NAME.XXXXXX, removed on exit unless KEEP is set)
# and `pids`: the processes killed on exit.
start_work() { # name
  work=$(mktemp -d "/tmp/podns-$1.XXXXXX")
  pids=()
  trap stop_work EXIT
}
stop_work() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] || rm -rf "$work"
}

# Until the simulator `pid` logs "simulator ready" in DIR/sim.log (else its
# log and exit 1); then sets `kubeconfig` (DIR/k.yaml) and `api`.
wait_sim() { # pid dir timeout_s
  local end=$(($(date +%s) + $3))
  until grep -q "simulator ready" "$2/sim.log"; do
    (($(date +%s) < end)) && kill -0 "$1" || { cat "$2/sim.log" >&2; exit 1; }
    sleep 0.2
  done
  kubeconfig=$2/k.yaml
  api=$(sed -n 's/.*server: *//p' "$kubeconfig" | head -1)
}

# The simulator (BIN sim on 127.0.0.1 with its kubelet), its log and
# kubeconfig in DIR, `sim flags` added; sets sim_pid, then waits for it as
# wait_sim does.
start_sim_in() { # dir timeout_s [sim flags...]
  "$BIN" sim --listen 127.0.0.1:0 --kubelet --kubeconfig-out "$1/k.yaml" "${@:3}" >"$1/sim.log" 2>&1 &
  sim_pid=$!
  pids+=("$sim_pid")
  wait_sim "$sim_pid" "$1" "$2"
}

# Until podns `pid` answers /readyz 200 on its admin port (ADMIN unless
# given); 1 when it died or the time ran out.
wait_readyz() { # pid timeout_s [admin port]
  local end=$(($(date +%s) + $2))
  until curl -fsS "http://127.0.0.1:${3:-$ADMIN}/readyz" >/dev/null 2>&1; do
    (($(date +%s) < end)) && kill -0 "$1" || return 1
    sleep 0.02
  done
}

# podns serve against the simulator (kubeconfig), DNS on 127.0.0.1:P_DNS,
# admin on ADMIN, its log in work/podns.log; sets podns_pid and returns once
# it is ready (else its log and exit 1).
serve_ready() { # timeout_s
  "$BIN" serve --kubeconfig "$kubeconfig" --dns-listen 127.0.0.1:$P_DNS \
    --admin-listen 127.0.0.1:$ADMIN --ns-address 127.0.0.1 >"$work/podns.log" 2>&1 &
  podns_pid=$!
  pids+=("$podns_pid")
  wait_readyz "$podns_pid" "$1" || { cat "$work/podns.log" >&2; exit 1; }
  log "podns ready (load average $(cut -d' ' -f1-3 /proc/loadavg))"
}
