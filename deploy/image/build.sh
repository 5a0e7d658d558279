#!/usr/bin/env bash
# The podns image, for linux/amd64 and linux/arm64 under one OCI image
# index, without a daemon and without a base image:
#
#   deploy/image/build.sh [--platform linux/amd64|linux/arm64]… [--binary PATH] [--out FILE]
#
# builds the release binary of each platform as the Dockerfile does (`cargo
# build --release --locked --no-default-features --bin podns`, then strip)
# into a cargo target directory of its own, target/image/, so the
# target/release/podns of a plain `cargo build --release` (with the
# simulator) stays as it was. arm64 is cross-compiled: rustup's
# aarch64-unknown-linux-gnu target and Debian's cross toolchain
# (gcc-aarch64-linux-gnu, whose libc6-arm64-cross in /usr/aarch64-linux-gnu
# gives the image its loader and libraries). --platform (repeatable; default
# both) builds fewer; --binary names a binary to use instead of building one,
# with exactly one --platform.
#
# Writes one OCI image archive (default target/image/podns-VERSION.oci.tar)
# that holds every platform's image under one index named
# docker.io/library/podns:VERSION, and prints each platform's manifest
# digest and the index's, one `WHAT DIGEST` line each:
#
#   linux/amd64 sha256:…
#   linux/arm64 sha256:…
#   index sha256:…
#
# FILE.digest holds the index's, the one to pin: a runtime picks its
# platform's image from it. `ctr images import`, `skopeo copy --all
# oci-archive:FILE …` (deploy/image/push.sh) and `docker load -i FILE` (this
# machine's platform) read it.
#
# The layout is the Dockerfile's (tests/integration/image.rs holds the two
# together): /usr/local/bin/podns, /usr/local/bin/podns-bind53 with the file
# capability cap_net_bind_service=+ep, user 65532:65532, entrypoint podns,
# the same default command and ports. Besides the two binaries the image
# holds only what they load at run time: the ELF interpreter and the shared
# libraries (glibc, libgcc_s), /etc/passwd and /etc/group with the nonroot
# user, and /etc/nsswitch.conf. No shell, no CA bundle: in a pod the API
# server's CA comes with the ServiceAccount token and the relays' with the
# node instances' kubeconfig.
#
# Reproducible: the same tree gives the same digests (deploy/image/oci.py
# says how; the build pins mtimes to SOURCE_DATE_EPOCH, default 0, and
# remaps this checkout's and cargo's paths in the binaries).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() { echo "deploy/image/build.sh: $*" >&2; exit 2; }
usage() { echo "deploy/image/build.sh: $*" >&2; echo "usage: deploy/image/build.sh [--platform linux/amd64|linux/arm64]… [--binary PATH] [--out FILE]" >&2; exit 64; }

binary=""
out=""
platforms=()
while (($#)); do
  case "$1" in
    --binary) [[ $# -ge 2 ]] || usage "--binary needs a path"; binary="$2"; shift 2 ;;
    --out) [[ $# -ge 2 ]] || usage "--out needs a file"; out="$2"; shift 2 ;;
    --platform) [[ $# -ge 2 ]] || usage "--platform needs linux/amd64 or linux/arm64"; platforms+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,44p' "$0"; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
((${#platforms[@]})) || platforms=(linux/amd64 linux/arm64)
for p in "${platforms[@]}"; do
  [[ "$p" == linux/amd64 || "$p" == linux/arm64 ]] || usage "--platform $p: linux/amd64 or linux/arm64"
done
[[ -z "$binary" || ${#platforms[@]} -eq 1 ]] || usage "--binary needs exactly one --platform"
command -v python3 >/dev/null 2>&1 || die "python3 is missing (apt-get install python3)"

host="$(uname -m)"
triple() { case "$1" in linux/amd64) echo x86_64-unknown-linux-gnu ;; linux/arm64) echo aarch64-unknown-linux-gnu ;; esac; }
gnu() { case "$1" in linux/amd64) echo x86_64-linux-gnu ;; linux/arm64) echo aarch64-linux-gnu ;; esac; }
native() { [[ "$(gnu "$1")" == "$host-linux-gnu" ]]; }
# The tools each platform needs, named with how to get them, before
# anything builds.
for p in "${platforms[@]}"; do
  if native "$p"; then
    for tool in strip ldd; do
      command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install binutils libc-bin)"
    done
  else
    g="$(gnu "$p")"
    pkg="gcc-${g//_/-}"
    command -v "$g-strip" >/dev/null 2>&1 || die "no $g-strip for $p (apt-get install $pkg)"
    [[ -d "/usr/$g/lib" ]] || die "no /usr/$g/lib for $p's loader and libraries (apt-get install $pkg)"
    if [[ -z "$binary" ]]; then
      command -v "$g-gcc" >/dev/null 2>&1 || die "no $g-gcc to link $p (apt-get install $pkg)"
      rustup target list --installed 2>/dev/null | grep -qx "$(triple "$p")" ||
        die "no Rust target $(triple "$p") (rustup target add $(triple "$p"))"
    fi
  fi
done

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
[[ -n "$version" ]] || die "no package version in $root/Cargo.toml"
name="docker.io/library/podns:$version"
out="${out:-$root/target/image/podns-$version.oci.tar}"
mkdir -p "$(dirname "$out")"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
lines=()
archives=()
for p in "${platforms[@]}"; do
  t="$(triple "$p")"
  g="$(gnu "$p")"
  bin="$binary"
  if [[ -z "$bin" ]]; then
    # A target directory of its own, and an explicit --target, so the
    # build changes nothing of target/release or target/debug. The remapped
    # paths keep this checkout's and cargo's locations out of the binary
    # (panic messages name source files), so another clone of the same
    # tree builds the same bytes.
    (
      cd "$root"
      export RUSTFLAGS="--remap-path-prefix=$root=/podns --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
      native "$p" || export "CARGO_TARGET_$(echo "$t" | tr 'a-z-' 'A-Z_')_LINKER=$g-gcc"
      cargo build --release --locked --no-default-features --bin podns \
        --target "$t" --target-dir "$root/target/image"
    ) >&2
    bin="$root/target/image/$t/release/podns"
  fi
  [[ -x "$bin" ]] || die "$bin is not an executable"
  if native "$p"; then
    strip -o "$stage/podns-$g" "$bin"
    sysroot=()
  else
    "$g-strip" -o "$stage/podns-$g" "$bin"
    sysroot=(--sysroot "/usr/$g")
  fi
  digest="$(python3 "$here/oci.py" build --out "$stage/$g.tar" --platform "$p" "${sysroot[@]}" \
    --name "$name" \
    --file "$stage/podns-$g:/usr/local/bin/podns:0755" \
    --file "$stage/podns-$g:/usr/local/bin/podns-bind53:0755" \
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
  lines+=("$p $digest")
  archives+=("$stage/$g.tar")
done
index="$(python3 "$here/oci.py" index --out "$out" --name "$name" "${archives[@]}")"
echo "$index" >"$out.digest"
echo "deploy/image/build.sh: $out ($(du -k "$out" | cut -f1) KiB) $name@$index (${platforms[*]})" >&2
printf '%s\n' "${lines[@]}" "index $index"
