#!/usr/bin/env bash
# The podns image, without a daemon and without a base image:
#
#   deploy/image/build.sh [--binary PATH] [--out FILE]
#
# builds the release binary as the Dockerfile does (`cargo build --release
# --locked --no-default-features --bin podns`, then strip), unless --binary
# names one, and writes an OCI image archive (default
# target/image/podns-VERSION.oci.tar; FILE.digest holds its digest, which it
# also prints). `ctr images import`, `skopeo copy oci-archive:FILE …` /
# `docker-archive:FILE` and `docker load -i FILE` read it.
#
# The layout is the Dockerfile's (tests/integration/image.rs holds the two
# together): /usr/local/bin/podns, /usr/local/bin/podns-bind53 with the file
# capability cap_net_bind_service=+ep, user 65532:65532, entrypoint podns,
# the same default command and ports. Besides the two binaries the image
# holds only what they load at run time: the ELF interpreter and the shared
# libraries ldd names (glibc, libgcc_s), /etc/passwd and /etc/group with
# the nonroot user, and /etc/nsswitch.conf. No shell, no CA bundle: in a pod
# the API server's CA comes with the ServiceAccount token and the relays'
# with the node instances' kubeconfig.
#
# Reproducible: the same tree gives the same digest (deploy/image/oci.py
# says how; the build pins mtimes to SOURCE_DATE_EPOCH, default 0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() { echo "deploy/image/build.sh: $*" >&2; exit 2; }

binary=""
out=""
while (($#)); do
  case "$1" in
    --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
    --out) out="${2:?--out needs a file}"; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (--binary PATH, --out FILE)" ;;
  esac
done
for tool in python3 strip ldd; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install python3 binutils libc-bin)"
done

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
[[ -n "$version" ]] || die "no package version in $root/Cargo.toml"
if [[ -z "$binary" ]]; then
  (cd "$root" && cargo build --release --locked --no-default-features --bin podns) >&2
  binary="$root/target/release/podns"
fi
[[ -x "$binary" ]] || die "$binary is not an executable"
out="${out:-$root/target/image/podns-$version.oci.tar}"
mkdir -p "$(dirname "$out")"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
strip -o "$stage/podns" "$binary"

digest="$(python3 "$here/oci.py" build --out "$out" \
  --name "docker.io/library/podns:$version" \
  --file "$stage/podns:/usr/local/bin/podns:0755" \
  --file "$stage/podns:/usr/local/bin/podns-bind53:0755" \
  --cap /usr/local/bin/podns-bind53:cap_net_bind_service \
  --libs-of /usr/local/bin/podns \
  --text '/etc/passwd:0644:root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  --text '/etc/group:0644:root:x:0:\nnonroot:x:65532:\n' \
  --text '/etc/nsswitch.conf:0644:passwd: files\ngroup: files\nhosts: files dns\n' \
  --user 65532:65532 \
  --entrypoint '["/usr/local/bin/podns"]' \
  --cmd '["serve","--dns-listen=0.0.0.0:5353","--admin-listen=0.0.0.0:9153"]' \
  --env PATH=/usr/local/bin \
  --expose 5353/udp --expose 5353/tcp --expose 9153/tcp \
  --label "org.opencontainers.image.title=podns" \
  --label "org.opencontainers.image.version=$version")"
echo "$digest" >"$out.digest"
echo "deploy/image/build.sh: $out ($(du -k "$out" | cut -f1) KiB) docker.io/library/podns:$version@$digest" >&2
echo "$digest"
