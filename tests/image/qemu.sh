#!/usr/bin/env bash
# The arm64 image's podns, run under qemu-user on this machine, answers DNS:
#
#   tests/image/qemu.sh [ARCHIVE]
#
# ARCHIVE is deploy/image/build.sh's (default
# target/image/podns-VERSION.oci.tar). Its linux/arm64 image is unpacked
# into a directory that qemu-user's -L points at, so the arm64 loader and
# libraries it runs with are the image's own, not the cross toolchain's.
# Then, on loopback only:
#   1. `podns --version` names this version and no features (the image's
#      build has no simulator);
#   2. this machine's podns (PODNS, default target/release/podns, built
#      with the simulator) runs `podns sim` with one 4-rank job;
#   3. the arm64 `podns serve` watches it, turns ready (/readyz), and
#      answers the job's headless name with the 4 pod IPs the simulator
#      gave, over UDP and TCP, and one rank's hostname name with its IP.
# Exits 0 when all hold, 1 when one fails (its logs printed), 2 when a tool
# is missing (named, with how to install it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() { echo "tests/image/qemu.sh: $*" >&2; exit 2; }
[[ $# -le 1 ]] || { echo "usage: tests/image/qemu.sh [ARCHIVE]" >&2; exit 64; }
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
archive="${1:-$root/target/image/podns-$version.oci.tar}"
podns="${PODNS:-$root/target/release/podns}"
[[ -f "$archive" ]] || die "no $archive (deploy/image/build.sh writes it)"
[[ -x "$podns" ]] || die "no $podns to run the simulator (cargo build --release, or set PODNS)"
qemu="$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)"
[[ -n "$qemu" ]] || die "no qemu-aarch64 (apt-get install qemu-user-static)"
for tool in dig curl python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install bind9-dnsutils curl python3)"
done

work="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "tests/image/qemu.sh: FAIL: $*" >&2
  for log in "$work"/*.log; do
    [[ -f "$log" ]] && { echo "--- $log" >&2; tail -20 "$log" >&2; }
  done
  exit 1
}
# Poll until COMMAND succeeds, at most SECONDS.
wait_for() { # what seconds command…
  local what="$1" secs="$2"
  local until=$((SECONDS + secs))
  shift 2
  until "$@" >/dev/null; do
    ((SECONDS < until)) || fail "$what: not within ${secs}s"
    sleep 0.2
  done
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

rootfs="$work/rootfs"
python3 "$root/deploy/image/oci.py" unpack "$archive" --platform linux/arm64 "$rootfs"
arm64=("$qemu" -L "$rootfs" "$rootfs/usr/local/bin/podns")
for lib in /lib/aarch64-linux-gnu/libc.so.6 /usr/lib/aarch64-linux-gnu/libc.so.6; do
  # qemu's -L falls back to this machine's paths for what ROOT lacks.
  [[ -e "$lib" ]] && echo "tests/image/qemu.sh: note: this machine has its own $lib; a library missing from the image would be taken from there" >&2
done

# 1. --version.
got="$("${arm64[@]}" --version)" || fail "the arm64 podns --version exited $?"
echo "arm64 image: $got"
[[ "$got" == "podns $version ("*"features: none)" ]] || fail "--version said '$got', want podns $version … features: none"

# 2. The simulator, this machine's podns.
api="$(free_port)"
env -u KUBECONFIG "$podns" sim --listen "127.0.0.1:$api" --jobs 1 --ranks 4 --kubelet \
  --kubeconfig-out "$work/kubeconfig" >"$work/sim.log" 2>&1 &
pids+=($!)
pods_have_ips() {
  curl -sf "http://127.0.0.1:$api/api/v1/namespaces/default/pods" >"$work/pods.json" &&
    [[ "$(python3 -c 'import json,sys; print(sum(1 for p in json.load(open(sys.argv[1]))["items"] if p["status"].get("podIP")))' "$work/pods.json")" == 4 ]]
}
wait_for "the simulator's 4 pods with IPs" 30 pods_have_ips
want="$(python3 -c 'import json,sys; print(" ".join(sorted(p["status"]["podIP"] for p in json.load(open(sys.argv[1]))["items"])))' "$work/pods.json")"
rank0="$(python3 -c 'import json,sys; print(" ".join("%s %s %s" % (p["spec"]["hostname"], p["spec"]["subdomain"], p["status"]["podIP"]) for p in json.load(open(sys.argv[1]))["items"] if p["spec"]["hostname"].endswith("-0")))' "$work/pods.json")"
read -r host sub ip0 <<<"$rank0"

# 3. The arm64 server. qemu-user 7.2 lacks setsockopt(SO_RXQ_OVFL), which
# podns asks of each UDP socket: qemu-setsockopt.c, preloaded under qemu
# only, turns that one ENOPROTOOPT into a no-op.
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || die "no aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)"
aarch64-linux-gnu-gcc -shared -fPIC -O2 -o "$work/qemu-setsockopt.so" "$here/qemu-setsockopt.c"
dns="$(free_port)"
admin="$(free_port)"
t0=$SECONDS
env -u KUBECONFIG "$qemu" -L "$rootfs" -E "LD_PRELOAD=$work/qemu-setsockopt.so" \
  "$rootfs/usr/local/bin/podns" serve --kubeconfig "$work/kubeconfig" \
  --dns-listen "127.0.0.1:$dns" --admin-listen "127.0.0.1:$admin" >"$work/serve-arm64.log" 2>&1 &
serve=$!
pids+=("$serve")
ready() {
  kill -0 "$serve" 2>/dev/null || fail "the arm64 podns serve exited"
  curl -sf "http://127.0.0.1:$admin/readyz"
}
wait_for "the arm64 podns /readyz" 120 ready
echo "arm64 podns serve under qemu: ready in $((SECONDS - t0)) s"
answer() { # dig-args…
  dig @127.0.0.1 -p "$dns" +norec +short +time=5 +tries=1 "$@" | sort | xargs
}
for proto in +notcp +tcp; do
  got="$(answer "$sub.default.svc.cluster.local" A "$proto")"
  [[ "$got" == "$want" ]] || fail "$sub.default.svc.cluster.local A ($proto): '$got', want '$want'"
  echo "dig $proto $sub.default.svc.cluster.local A: $got"
done
got="$(answer "$host.$sub.default.svc.cluster.local" A)"
[[ "$got" == "$ip0" ]] || fail "$host.$sub.default.svc.cluster.local A: '$got', want '$ip0'"
echo "dig $host.$sub.default.svc.cluster.local A: $got"
echo "tests/image/qemu.sh: the arm64 image answered"
