# Sourced by run-all.sh and udp-buffers.sh: the tools they need, a process
# tree's CPU, and NSD
# and Knot serving a zone directory from `podns zonefile` on a loopback
# port, one UDP worker each, pinned to core 0. The caller has a `pids`
# array (killed on exit) and ZONE set.

# utime+stime (clock ticks) of a process and all its descendants.
cpu_ticks() {
  local p t=0 c
  for p in $(descendants "$1"); do
    # fields after "pid (comm) ": comm may hold spaces ("nsd: server 1")
    c=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')
    c=${c:-0}
    t=$((t + c))
  done
  echo "$t"
}
descendants() {
  echo "$1"
  local c
  for c in $(pgrep -P "$1"); do descendants "$c"; done
}

# NSD's response rate limiting is off (Debian builds it in; it would drop
# most of a benchmark).
start_nsd() { # port zones dir -> nsd_pid
  mkdir -p "$3"
  cat >"$3/nsd.conf" <<NSD
server:
  ip-address: 127.0.0.1
  port: $1
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "$2"
  pidfile: "$3/nsd.pid"
  database: ""
  zonelistfile: "$3/zone.list"
  xfrdfile: "$3/xfrd.state"
  xfrdir: "$3"
  logfile: "$3/nsd.log"
  server-count: 1
  tcp-count: 64
  verbosity: 1
  reuseport: no
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: "$ZONE"
  zonefile: "$ZONE.zone"
NSD
  taskset -c 0 nsd -d -c "$3/nsd.conf" >"$3/out" 2>&1 &
  nsd_pid=$!
  pids+=("$nsd_pid")
}

start_knot() { # port zones dir -> knot_pid
  mkdir -p "$3"
  cat >"$3/knot.conf" <<KNOT
server:
  listen: 127.0.0.1@$1
  rundir: "$3"
  udp-workers: 1
  tcp-workers: 1
  background-workers: 1
database:
  storage: "$3"
log:
  - target: stderr
    any: warning
template:
  - id: default
    storage: "$2"
    file: "%s.zone"
    zonefile-sync: -1
    journal-content: none
zone:
  - domain: $ZONE
KNOT
  taskset -c 0 knotd -c "$3/knot.conf" >"$3/out" 2>&1 &
  knot_pid=$!
  pids+=("$knot_pid")
}

# Install the Debian packages of the tools that are missing: each argument
# is command:package. Packaged services (nsd, knot) are kept from starting
# on port 53 while they install.
need_tools() {
  local t need=()
  for t in "$@"; do
    command -v "${t%%:*}" >/dev/null 2>&1 || [[ -x /usr/sbin/${t%%:*} ]] || need+=("${t#*:}")
  done
  ((${#need[@]})) || return 0
  echo "[$(date +%T)] installing ${need[*]}" >&2
  local own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  if ((own_policy)); then rm -f /usr/sbin/policy-rc.d; fi
}
