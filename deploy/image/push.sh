#!/usr/bin/env bash
# Pushes the image index deploy/image/build.sh wrote, and the Helm chart, to
# a registry:
#
#   deploy/image/push.sh [--archive FILE] [--plain-http] [--no-chart] REGISTRY[/PATH]
#
#   image  REGISTRY/PATH/podns:VERSION, every platform under the index, as
#          `skopeo copy --all --preserve-digests oci-archive:FILE
#          docker://REGISTRY/PATH/podns:VERSION`: the layers go up as built,
#          so the registry serves the digests build.sh printed (checked)
#   chart  REGISTRY/PATH/charts/podns:CHART_VERSION, as `helm package
#          deploy/helm/podns` and `helm push podns-CHART_VERSION.tgz
#          oci://REGISTRY/PATH/charts` (charts/, so the chart does not land
#          on the image's tag)
#
# and prints what it pushed, pinned by digest:
#
#   image REGISTRY/PATH/podns:VERSION@sha256:…
#   chart oci://REGISTRY/PATH/charts/podns:CHART_VERSION@sha256:…
#
# FILE defaults to target/image/podns-VERSION.oci.tar. Credentials are
# skopeo's and helm's own (`skopeo login REGISTRY`, `helm registry login
# REGISTRY`, or docker's config.json). --plain-http talks HTTP, for a
# registry without TLS (a test registry on loopback). helm is $HELM, else
# helm on PATH; --no-chart pushes the image alone.
#
# Then point the manifests at REGISTRY/PATH (deploy/README.md "Images"):
# `image.registry=REGISTRY/PATH` for the chart, newName in
# deploy/components/image for the kustomize overlays.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() { echo "deploy/image/push.sh: $*" >&2; exit 2; }
usage() { echo "deploy/image/push.sh: $*" >&2; echo "usage: deploy/image/push.sh [--archive FILE] [--plain-http] [--no-chart] REGISTRY[/PATH]" >&2; exit 64; }

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
archive="$root/target/image/podns-$version.oci.tar"
plain=0
chart=1
dest=""
while (($#)); do
  case "$1" in
    --archive) [[ $# -ge 2 ]] || usage "--archive needs a file"; archive="$2"; shift 2 ;;
    --plain-http) plain=1; shift ;;
    --no-chart) chart=0; shift ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    -*) usage "unknown flag '$1'" ;;
    *) [[ -z "$dest" ]] || usage "one REGISTRY[/PATH], got '$dest' and '$1'"; dest="${1%/}"; shift ;;
  esac
done
[[ -n "$dest" ]] || usage "no REGISTRY[/PATH]"
[[ "$dest" != *://* ]] || usage "REGISTRY[/PATH] without a scheme, got '$dest'"
[[ -f "$archive" ]] || die "no $archive (deploy/image/build.sh writes it)"
command -v skopeo >/dev/null 2>&1 || die "skopeo is missing (apt-get install skopeo)"
helm="${HELM:-$(command -v helm || true)}"
((chart == 0)) || [[ -n "$helm" && -x "$helm" ]] ||
  die "no helm for the chart (set HELM, put helm on PATH, or --no-chart)"

chart_version="$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$root/deploy/helm/podns/Chart.yaml" | head -1)"
[[ -n "$chart_version" ]] || die "no version in deploy/helm/podns/Chart.yaml"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

image="$dest/podns:$version"
tls=()
((plain)) && tls=(--dest-tls-verify=false)
skopeo copy --quiet --all --preserve-digests "${tls[@]}" --digestfile "$work/digest" \
  "oci-archive:$archive" "docker://$image" >&2
pushed="$(cat "$work/digest")"
if [[ -f "$archive.digest" ]]; then
  built="$(cat "$archive.digest")"
  [[ "$pushed" == "$built" ]] || die "$image is $pushed in the registry, but the archive's index is $built"
fi
echo "image $image@$pushed"

if ((chart)); then
  "$helm" package "$root/deploy/helm/podns" --destination "$work" >/dev/null
  http=()
  ((plain)) && http=(--plain-http)
  "$helm" push "$work/podns-$chart_version.tgz" "oci://$dest/charts" "${http[@]}" >"$work/push.log" 2>&1 ||
    die "helm push failed: $(cat "$work/push.log")"
  digest="$(sed -n 's/^Digest: //p' "$work/push.log")"
  [[ "$digest" == sha256:* ]] || die "helm push printed no digest: $(cat "$work/push.log")"
  echo "chart oci://$dest/charts/podns:$chart_version@$digest"
fi
