#!/usr/bin/env bash
# Builds the real parts from source through the Go module proxy, at the
# versions pinned in versions.env, into a cache directory shared by every
# checkout on the machine:
#
#   tests/cluster/build.sh                  every pinned part and version
#   tests/cluster/build.sh --k8s V PART…    PARTs (etcd kubernetes kwok coredns
#                                           helm oracle, or all) for Kubernetes V only
#
# and prints the bin dir. Each binary is $bin/NAME-VERSION; the unversioned
# $bin/NAME links to the default release (K8S_VERSION, its etcd,
# COREDNS_VERSION), so a PATH with $bin on it has the default's kubectl.
# `coredns` builds both CoreDNS pins; `kubernetes` and `etcd` build the
# release --k8s names (default: every release in K8S_VERSIONS).
#
# The cache is $PODNS_CLUSTER_CACHE (default ~/.cache/podns-cluster); each
# part lands in a directory named by its version, so a change of pin builds
# anew and an unchanged pin builds nothing. A part is installed only when its
# build finished (binaries are written under a temporary name and renamed).
#
# Nothing here downloads a prebuilt binary: the Go module proxy serves
# sources, and `go build` compiles them here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

die() { echo "tests/cluster/build.sh: $*" >&2; exit 2; }

command -v go >/dev/null 2>&1 ||
  die "no Go toolchain on PATH: install Go ≥ 1.24 (Debian: apt-get install golang-go, or the go.dev toolchain) and the Go module proxy must be reachable"
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
[[ "$go_minor" =~ ^[0-9]+$ && "$go_minor" -ge 24 ]] ||
  die "Go $(go env GOVERSION) is too old: Kubernetes ${K8S_VERSION} needs Go ≥ 1.24 (set GOTOOLCHAIN=go1.24.0 or newer to fetch one from the module proxy)"

cache="${PODNS_CLUSTER_CACHE:-$HOME/.cache/podns-cluster}"
bin="$cache/bin"
mkdir -p "$bin" "$cache/src"
export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false"
export CGO_ENABLED=0

log() { echo "build: $*" >&2; }

# link NAME VERSIONED: $bin/NAME -> VERSIONED's file name.
link() {
  local name="$1" versioned="$2"
  ln -sfn "$(basename "$versioned")" "$bin/$name"
}
# link_default NAME…: the unversioned names of the default release's
# Kubernetes binaries, once that release is built (building another release
# never moves them).
link_default() {
  local c
  for c in "$@"; do
    [[ -x "$bin/$c-$default_k8s" ]] && link "$c" "$bin/$c-$default_k8s"
  done
  return 0
}

# A wrapper module that requires MODULE@VERSION, pins the replace lines the
# module's own go.mod carries for its in-tree (staging) modules to that
# release's published versions, and builds the given main packages.
build_k8s() {
  local K8S_VERSION="$1"
  # kubelet and kube-proxy run the real node (up.sh --real-node).
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
  local missing=()
  for c in "${want[@]}"; do
    [[ -x "$bin/$c-$K8S_VERSION" ]] || missing+=("$c")
  done
  ((${#missing[@]})) || { link_default "${want[@]}"; return 0; }
  local dir="$cache/src/kubernetes-$K8S_VERSION"
  mkdir -p "$dir"
  local staging="v0.${K8S_VERSION#v1.}"
  log "kubernetes $K8S_VERSION (staging modules $staging): ${missing[*]}"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
  {
    echo "module podns.local/cluster-build"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # Every `k8s.io/x => ./staging/src/k8s.io/x` of the release's go.mod
    # becomes `k8s.io/x => k8s.io/x v0.N.P`.
    sed -n -E 's#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[A-Za-z0-9._/-]+)[[:space:]]+=>[[:space:]]+\./staging/src/.*#replace \2 => \2 '"$staging"'#p' "$gomod"
  } >"$dir/go.mod"
  grep -q '^replace k8s.io/api ' "$dir/go.mod" || die "no staging replace lines found in k8s.io/kubernetes@$K8S_VERSION's go.mod"
  {
    echo "//go:build tools"
    echo
    echo "// Package tools names the commands this module builds."
    echo "package tools"
    echo
    echo "import ("
    for c in "${want[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
    echo ")"
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy >/dev/null 2>"$dir/tidy.log") || { cat "$dir/tidy.log" >&2; die "go mod tidy failed for kubernetes $K8S_VERSION"; }
  local ld="-s -w"
  local major minor
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for c in "${missing[@]}"; do
    log "  go build $c"
    (cd "$dir" && go build -ldflags "$ld" -o "$bin/$c-$K8S_VERSION.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$bin/$c-$K8S_VERSION.tmp" "$bin/$c-$K8S_VERSION"
  done
  link_default "${want[@]}"
}

# build_plain NAME MODULE VERSION PACKAGE: a wrapper module that requires
# MODULE@VERSION and builds PACKAGE (works whether or not the module's own
# go.mod has replace lines, which `go install pkg@version` refuses).
build_plain() {
  local name="$1" module="$2" version="$3" pkg="$4" default="${5:-$3}"
  if [[ -x "$bin/$name-$version" ]]; then
    [[ "$version" == "$default" ]] && link "$name" "$bin/$name-$version"
    return 0
  fi
  local dir="$cache/src/$name-$version"
  mkdir -p "$dir"
  log "$name $version ($pkg)"
  printf 'module podns.local/%s-build\n\ngo 1.24.0\n\nrequire %s %s\n' "$name" "$module" "$version" >"$dir/go.mod"
  printf '//go:build tools\n\n// Package tools names the command this module builds.\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$dir/tools.go"
  (cd "$dir" && go mod tidy >/dev/null 2>"$dir/tidy.log") || { cat "$dir/tidy.log" >&2; die "go mod tidy failed for $module@$version"; }
  (cd "$dir" && go build -ldflags "-s -w" -o "$bin/$name-$version.tmp" "$pkg")
  mv "$bin/$name-$version.tmp" "$bin/$name-$version"
  [[ "$version" == "$default" ]] && link "$name" "$bin/$name-$version"
  return 0
}

build_etcd() {
  local v="$1"
  if build_plain etcd go.etcd.io/etcd/server/v3 "$v" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" 2>"$cache/src/etcd-$v.log"; then
    return 0
  fi
  cat "$cache/src/etcd-$v.log" >&2
  # Fallback: Debian's etcd-server, when the module build is not possible.
  if command -v etcd >/dev/null 2>&1 || [[ -x /usr/bin/etcd ]]; then
    log "etcd: module build failed; using $(command -v etcd || echo /usr/bin/etcd)"
    ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$bin/etcd-$v"
    [[ "$v" == "$ETCD_VERSION" ]] && ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$bin/etcd"
    return 0
  fi
  die "etcd $v did not build; apt-get install etcd-server is the fallback"
}

# CoreDNS's default plugin set (its plugin.cfg, compiled into zplugin.go in
# the published module) includes kubernetes, forward, cache and prometheus.
build_coredns() {
  build_plain coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
  build_plain coredns github.com/coredns/coredns "$COREDNS_LATEST" github.com/coredns/coredns "$COREDNS_VERSION"
}

build_kwok() {
  build_plain kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
}

build_helm() {
  build_plain helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
}

# --- chaos oracle (benches/harness/chaos.py): a part of our own, not a pin.
# build_oracle K8S: tests/cluster/oracle/main.go (client-go, no podns code)
# with client-go at the release's staging version, as
# $bin/podns-oracle-K8S-HASH (HASH: its source's), linked as
# $bin/podns-oracle-K8S (and podns-oracle for the default release): a
# changed source builds anew, an unchanged one nothing.
build_oracle() {
  local K8S_VERSION="$1" staging hash out dir
  staging="v0.${K8S_VERSION#v1.}"
  hash="$(sha256sum <"$here/oracle/main.go" | cut -c1-12)"
  out="$bin/podns-oracle-$K8S_VERSION-$hash"
  if [[ ! -x "$out" ]]; then
    dir="$cache/src/podns-oracle-$K8S_VERSION-$hash"
    mkdir -p "$dir"
    log "podns-oracle $K8S_VERSION (client-go $staging)"
    cp "$here/oracle/main.go" "$dir/main.go"
    printf 'module podns.local/oracle\n\ngo 1.24.0\n\nrequire (\n\tk8s.io/api %s\n\tk8s.io/apimachinery %s\n\tk8s.io/client-go %s\n)\n' \
      "$staging" "$staging" "$staging" >"$dir/go.mod"
    (cd "$dir" && go mod tidy >/dev/null 2>"$dir/tidy.log") || { cat "$dir/tidy.log" >&2; die "go mod tidy failed for podns-oracle ($K8S_VERSION)"; }
    (cd "$dir" && go build -ldflags "-s -w" -o "$out.tmp" .)
    mv "$out.tmp" "$out"
  fi
  link "podns-oracle-$K8S_VERSION" "$out"
  [[ "$K8S_VERSION" == "$default_k8s" ]] && link podns-oracle "$out"
  return 0
}
# --- end chaos oracle

default_k8s="$K8S_VERSION"
releases=($K8S_VERSIONS)
if [[ "${1:-}" == --k8s ]]; then
  [[ $# -ge 2 ]] || die "--k8s needs a version (one of: $K8S_VERSIONS)"
  v="$2"; [[ "$v" == v* ]] || v="v$v"
  etcd_for "$v" >/dev/null || die "Kubernetes $v is not pinned in versions.env (pinned: $K8S_VERSIONS)"
  releases=("$v")
  shift 2
fi
parts=("$@")
((${#parts[@]})) || parts=(all)
k8s_all() { local r; for r in "${releases[@]}"; do build_k8s "$r"; done; }
etcd_all() { local r; for r in "${releases[@]}"; do build_etcd "$(etcd_for "$r")"; done; }
oracle_all() { local r; for r in "${releases[@]}"; do build_oracle "$r"; done; }
for p in "${parts[@]}"; do
  case "$p" in
    etcd) etcd_all ;;
    kubernetes | k8s) k8s_all ;;
    kwok) build_kwok ;;
    coredns) build_coredns ;;
    helm) build_helm ;;
    oracle) oracle_all ;;
    all) etcd_all; k8s_all; build_kwok; build_coredns; build_helm; oracle_all ;;
    *) die "unknown part '$p' (etcd, kubernetes, kwok, coredns, helm, oracle, all)" ;;
  esac
done
echo "$bin"
