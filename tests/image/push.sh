#!/usr/bin/env bash
# deploy/image/push.sh against a registry on loopback, and the manifests
# pointed at it name what was pushed:
#
#   tests/image/push.sh [ARCHIVE]
#
# ARCHIVE is deploy/image/build.sh's (default
# target/image/podns-VERSION.oci.tar). The registry is distribution's
# (github.com/distribution/distribution/v3/cmd/registry, REGISTRY_VERSION
# below), built with Go from the module proxy into
# ~/.cache/podns-cluster/bin/registry-REGISTRY_VERSION once (or
# $PODNS_REGISTRY), run on 127.0.0.1 with its storage in a temporary
# directory. Checks:
#   1. push.sh --plain-http pushes the index and the chart, and prints them
#      pinned by digest;
#   2. the registry serves the index under the digest build.sh printed,
#      holding exactly the archive's platforms (linux/amd64, linux/arm64),
#      each manifest fetchable by its digest, each config of its platform;
#   3. the chart comes back (`helm pull`) with the chart's version, and the
#      image it renders with image.registry=the registry is the one pushed
#      (skopeo finds it there); so does the kustomize overlay pointed at
#      the registry (when kubectl is on PATH).
# helm: $HELM, ~/.cache/podns-cluster/bin/helm (tests/cluster/build.sh
# helm), or helm on PATH. Exits 0 when all hold, 1 when one fails, 2 when a
# tool is missing (named, with how to install it).
set -euo pipefail
REGISTRY_VERSION=v3.1.2
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() { echo "tests/image/push.sh: $*" >&2; exit 2; }
[[ $# -le 1 ]] || { echo "usage: tests/image/push.sh [ARCHIVE]" >&2; exit 64; }
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
archive="${1:-$root/target/image/podns-$version.oci.tar}"
[[ -f "$archive" && -f "$archive.digest" ]] || die "no $archive and its .digest (deploy/image/build.sh writes them)"
for tool in skopeo curl python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install $tool)"
done
cache="$HOME/.cache/podns-cluster/bin"
export HELM="${HELM:-}"
[[ -n "$HELM" ]] || { [[ -x "$cache/helm" ]] && HELM="$cache/helm"; } || HELM="$(command -v helm || true)"
[[ -n "$HELM" && -x "$HELM" ]] || die "no helm (tests/cluster/build.sh helm, or set HELM)"

registry="${PODNS_REGISTRY:-$cache/registry-$REGISTRY_VERSION}"
if [[ ! -x "$registry" ]]; then
  command -v go >/dev/null 2>&1 || die "no registry at $registry and no Go to build it"
  echo "tests/image/push.sh: building distribution's registry $REGISTRY_VERSION into $registry" >&2
  gobin="$(mktemp -d)"
  (cd /tmp && GOBIN="$gobin" CGO_ENABLED=0 GOFLAGS=-trimpath \
    go install -ldflags=-s "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION") ||
    die "go install github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION failed"
  mkdir -p "$(dirname "$registry")"
  mv "$gobin/registry" "$registry"
  rm -rf "$gobin"
fi

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
  echo "tests/image/push.sh: FAIL: $*" >&2
  [[ -f "$work/registry.log" ]] && { echo "--- registry log" >&2; tail -20 "$work/registry.log" >&2; }
  exit 1
}
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
cat >"$work/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $work/storage}
http: {addr: "127.0.0.1:$port"}
EOF
# Nothing leaves the machine: no trace, metric or log exporter.
OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none \
  "$registry" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
pids+=($!)
until=$((SECONDS + 30))
until curl -sf "http://127.0.0.1:$port/v2/" >/dev/null; do
  ((SECONDS < until)) || fail "the registry did not answer /v2/ within 30s"
  sleep 0.2
done
dest="127.0.0.1:$port/podns-test"

# 1. Push.
t0=$SECONDS
"$root/deploy/image/push.sh" --archive "$archive" --plain-http "$dest" >"$work/pushed" || fail "push.sh exited $?"
cat "$work/pushed"
echo "pushed in $((SECONDS - t0)) s"
built="$(cat "$archive.digest")"
image_line="$(sed -n 's/^image //p' "$work/pushed")"
chart_line="$(sed -n 's/^chart //p' "$work/pushed")"
[[ "$image_line" == "$dest/podns:$version@$built" ]] || fail "push.sh printed image '$image_line', want $dest/podns:$version@$built"
[[ "$chart_line" == "oci://$dest/charts/podns:"*"@sha256:"* ]] || fail "push.sh printed chart '$chart_line'"

# 2. The registry's index is the archive's.
skopeo inspect --raw --tls-verify=false "docker://$dest/podns:$version" >"$work/index.json" ||
  fail "skopeo inspect --raw $dest/podns:$version"
served="sha256:$(sha256sum <"$work/index.json" | cut -d' ' -f1)"
[[ "$served" == "$built" ]] || fail "the registry serves index $served, the archive's is $built"
python3 "$root/deploy/image/oci.py" inspect "$archive" >"$work/archive.json"
python3 - "$work/index.json" "$work/archive.json" <<'EOF' || fail "the registry's index holds other platforms than the archive"
import json, sys
index = json.load(open(sys.argv[1]))
want = json.load(open(sys.argv[2]))["platforms"]
got = {"{os}/{architecture}".format(**m["platform"]): m["digest"] for m in index["manifests"]}
assert got == want, (got, want)
assert sorted(got) == ["linux/amd64", "linux/arm64"], sorted(got)
EOF
for platform in linux/amd64 linux/arm64; do
  digest="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["platforms"][sys.argv[2]])' "$work/archive.json" "$platform")"
  arch="$(skopeo inspect --config --tls-verify=false "docker://$dest/podns@$digest" |
    python3 -c 'import json,sys; c=json.load(sys.stdin); print(c["os"] + "/" + c["architecture"])')" ||
    fail "skopeo inspect --config $dest/podns@$digest"
  [[ "$arch" == "$platform" ]] || fail "$dest/podns@$digest is $arch, want $platform"
  echo "registry: $platform $digest"
done

# 3. The chart back, and the image the manifests name when pointed at the
# registry.
chart_version="${chart_line##*/podns:}"
chart_version="${chart_version%@*}"
mkdir "$work/pulled"
"$HELM" pull "oci://$dest/charts/podns" --version "$chart_version" --plain-http --destination "$work/pulled" >"$work/pull.log" 2>&1 ||
  fail "helm pull oci://$dest/charts/podns --version $chart_version: $(cat "$work/pull.log")"
tgz="$work/pulled/podns-$chart_version.tgz"
[[ -f "$tgz" ]] || fail "helm pull gave no $tgz"
rendered="$("$HELM" template podns "$tgz" --set "image.registry=$dest" |
  sed -n 's/^ *image: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | grep -v '^busybox' | sort -u)"
[[ "$rendered" == "$dest/podns:$version" ]] || fail "the pulled chart with image.registry=$dest names '$rendered'"
skopeo inspect --raw --tls-verify=false "docker://$rendered" >/dev/null || fail "the chart's image $rendered is not in the registry"
echo "chart: $chart_line renders $rendered, which the registry serves"
if command -v kubectl >/dev/null 2>&1; then
  placeholder="$(sed -n 's/^ *newName: *//p' "$root/deploy/components/image/kustomization.yaml")"
  mkdir "$work/overlay"
  cat >"$work/overlay/kustomization.yaml" <<EOF
resources: [$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$root/deploy/overlays/forward-target" "$work/overlay")]
images:
  - {name: $placeholder, newName: $dest/podns, digest: $built}
EOF
  rendered="$(kubectl kustomize "$work/overlay" | sed -n 's/^ *image: //p' | sort -u)"
  [[ "$rendered" == "$dest/podns@$built" ]] || fail "the overlay pointed at $dest names '$rendered'"
  skopeo inspect --raw --tls-verify=false "docker://$rendered" >/dev/null || fail "the overlay's image $rendered is not in the registry"
  echo "kustomize: the forward-target overlay pointed at $dest renders $rendered, which the registry serves"
fi
echo "tests/image/push.sh: pushed and found"
