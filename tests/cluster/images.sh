#!/usr/bin/env bash
# The images the real node runs (tests/cluster/up.sh DIR --real-node), made
# here the way deploy/image/build.sh makes podns's: no daemon, no base image,
# nothing pulled.
#
#   tests/cluster/images.sh OUT
#
# writes OUT/NAME.tar (OCI archives for `ctr images import`) and
# OUT/images.env (NAME_IMAGE=ref NAME_DIGEST=sha256:… for each):
#
#   podns    deploy/image/build.sh (the release build: linux/amd64 and
#            linux/arm64 under one index)
#   pause    the pod sandbox: tests/cluster/images/pause.c, static
#   busybox  Debian's busybox-static (the DaemonSet's init container)
#   coredns  the CoreDNS tests/cluster/build.sh built
#   client   busybox, glibc's getent and tests/cluster/images/resolve (a Go
#            program that looks names up with Go's resolver or glibc's), so
#            a pod resolves as training images do
#
# Image names are docker.io/podns-test/NAME:TAG (podns keeps the name its
# chart uses, docker.io/library/podns:VERSION); each is also named by its
# digest (NAME@sha256:…), so a pod may ask for it either way.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
die() { echo "tests/cluster/images.sh: $*" >&2; exit 2; }
[[ $# -eq 1 ]] || die "usage: tests/cluster/images.sh OUT"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
oci="$root/deploy/image/oci.py"

busybox="$(command -v busybox || true)"
[[ -n "$busybox" ]] && ! ldd "$busybox" >/dev/null 2>&1 ||
  die "no static busybox: apt-get install busybox-static"
command -v getent >/dev/null 2>&1 || die "no getent: apt-get install libc-bin"
command -v cc >/dev/null 2>&1 || die "no C compiler for the pause image: apt-get install gcc libc6-dev"
command -v go >/dev/null 2>&1 || die "no Go toolchain for the client image's resolver"
bin="$("$here/build.sh" coredns)" || exit 2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
env_lines=()
record() { # NAME REF DIGEST
  local upper
  upper="$(echo "$1" | tr 'a-z' 'A-Z')"
  env_lines+=("${upper}_IMAGE=$2" "${upper}_DIGEST=$3")
}
image() { # NAME REF oci.py-build-args…
  local name="$1" ref="$2" digest
  shift 2
  digest="$(python3 "$oci" build --out "$out/$name.tar" --name "$ref" "$@")"
  record "$name" "$ref" "$digest"
  echo "images: $ref@$digest" >&2
}
passwd=(--text '/etc/passwd:0644:root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh\n'
  --text '/etc/group:0644:root:x:0:\nnonroot:x:65532:\n'
  --text '/etc/nsswitch.conf:0644:passwd: files\ngroup: files\nhosts: files dns\n'
  --dir /tmp:1777)
# Every applet of busybox as a link in /bin.
applets=()
while read -r a; do
  [[ "$a" == busybox ]] || applets+=(--symlink "/bin/$a:busybox")
done < <("$busybox" --list)

# podns: the release image, every platform under one index (the node
# imports its own platform's); pods pin the index's digest, as they would
# pull it from a registry.
podns_digest="$("$root/deploy/image/build.sh" --out "$out/podns.tar" | sed -n 's/^index //p')"
[[ "$podns_digest" == sha256:* ]] || die "deploy/image/build.sh printed no index digest"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
record podns "docker.io/library/podns:$version" "$podns_digest"

cc -static -Os -s -o "$work/pause" "$here/images/pause.c"
image pause docker.io/podns-test/pause:1 \
  --file "$work/pause:/pause:0755" --entrypoint '["/pause"]' --user 65535:65535

image busybox docker.io/podns-test/busybox:1.35.0 \
  --file "$busybox:/bin/busybox:0755" "${applets[@]}" "${passwd[@]}" \
  --env PATH=/bin --cmd '["sh"]'

image coredns "docker.io/podns-test/coredns:$COREDNS_VERSION" \
  --file "$bin/coredns-$COREDNS_VERSION:/coredns:0755" "${passwd[@]}" \
  --entrypoint '["/coredns"]' --expose 53/udp --expose 53/tcp

(cd "$here/images/resolve" && CGO_ENABLED=1 go build -trimpath -buildvcs=false -ldflags=-s -o "$work/resolve" .)
image client docker.io/podns-test/client:1 \
  --file "$busybox:/bin/busybox:0755" "${applets[@]}" "${passwd[@]}" \
  --file "$(command -v getent):/usr/bin/getent:0755" --libs-of /usr/bin/getent \
  --file "$work/resolve:/usr/local/bin/resolve:0755" --libs-of /usr/local/bin/resolve \
  --env PATH=/usr/local/bin:/usr/bin:/bin --cmd '["sh"]'

printf '%s\n' "${env_lines[@]}" >"$out/images.env"
