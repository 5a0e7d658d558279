#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, in one command:
#
#   tests/cluster/up.sh DIR [NODES] [--real-node] [--k8s VERSION] [--no-taint-eviction]
#
# builds what is missing (tests/cluster/build.sh, pinned in versions.env),
# then starts etcd, kube-apiserver (secure port on 127.0.0.1, its own CA and
# serving certificate, RBAC, service-account token signing, the release's
# default feature gates), kube-controller-manager (every default controller:
# EndpointSlice, Job, service-account, garbage collector …), kube-scheduler
# and kwok with NODES fake nodes (default 4), waits until they are healthy,
# and writes:
#
#   DIR/kubeconfig   cluster admin (client certificate, system:masters)
#   DIR/env          KUBECONFIG= KUBECTL= COREDNS= ETCD_URL= APISERVER_URL=
#                    the pids (ETCD_PID= …), sourceable by sh
#   DIR/logs/*.log   each process's log
#
# tests/cluster/down.sh DIR stops exactly those pids. Everything binds
# 127.0.0.1 on free ports; kwok's pod IPs (node i's podCIDR 10.(128+i).0.0/16) and the
# Service range (10.96.0.0/16, fd00:96::/108) are data, never a destination.
#
# --real-node adds a node that runs containers (tests/cluster/real-node.sh
# says what and how): containerd, a kubelet, kube-proxy and CoreDNS as the
# cluster DNS, with the images of tests/cluster/images.sh (podns's from this
# tree) imported first. kube-apiserver then listens on the node IP
# 172.31.250.1 (an interface of the test's own) instead of 127.0.0.1, so pods
# reach it through the `kubernetes` Service; the real node's podCIDR is
# 10.254.0.0/16 (kwok's stay as they are, inside 10.128.0.0/9). DIR/env
# then also has REAL_NODE=, REAL_NODE_IP=, REAL_NODE_POD_CIDR=,
# CONTAINERD_SOCK=, CLUSTER_DNS= and each image's NAME_IMAGE= and
# NAME_DIGEST=. A part missing from the machine is named, with how to
# install it, before anything starts (exit 2). One real node per machine.
#
# --k8s VERSION (or PODNS_K8S=VERSION) runs another Kubernetes release
# pinned in versions.env (default K8S_VERSION) with its etcd: DIR/bin holds
# links to that release's binaries (NAME-VERSION in build.sh's cache, never
# the unversioned names, which stay the default's), and DIR/env's KUBECTL
# and CLUSTER_BIN point there, so the tests' kubectl is the cluster's own.
# DIR/env's K8S_VERSION says which release runs.
#
# --no-taint-eviction starts kube-controller-manager without its
# taint-eviction controller (`--controllers '*,-taint-eviction-controller'`),
# for benches with tens of thousands of pods: there kwok's node heartbeats
# fall behind, the node lifecycle controller taints the nodes unreachable
# (NoExecute) and, 300 s later, taint eviction deletes every pod. The taints
# and the pods' Ready=false still come; the pods and their IPs stay.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
die() { echo "tests/cluster/up.sh: $*" >&2; exit 2; }

usage="usage: tests/cluster/up.sh DIR [NODES] [--real-node] [--k8s VERSION] [--no-taint-eviction]"
real_node=0
k8s="${PODNS_K8S:-$K8S_VERSION}"
kcm_controllers='*'
args=()
while (($#)); do
  case "$1" in
    --real-node) real_node=1 ;;
    --k8s) [[ $# -ge 2 ]] || die "--k8s needs a version ($usage)"; k8s="$2"; shift ;;
    --k8s=*) k8s="${1#--k8s=}" ;;
    --no-taint-eviction) kcm_controllers='*,-taint-eviction-controller' ;;
    -*) die "unknown flag '$1' ($usage)" ;;
    *) args+=("$1") ;;
  esac
  shift
done
[[ "$k8s" == v* ]] || k8s="v$k8s"
etcd_version="$(etcd_for "$k8s")" || die "Kubernetes $k8s is not pinned in tests/cluster/versions.env (pinned: $K8S_VERSIONS)"
set -- "${args[@]}"
[[ $# -ge 1 && $# -le 2 && -n "$1" ]] || die "$usage"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
nodes="${2:-4}"
# shellcheck source=real-node.sh
. "$here/real-node.sh"
[[ "$nodes" =~ ^[0-9]+$ && "$nodes" -ge 1 && "$nodes" -le 100 ]] || die "NODES must be a number from 1 to 100, got '$nodes'"
[[ -e "$dir/env" ]] && grep -q '^APISERVER_PID=' "$dir/env" &&
  kill -0 "$(sed -n 's/^APISERVER_PID=//p' "$dir/env")" 2>/dev/null &&
  die "$dir already holds a running cluster (tests/cluster/down.sh $dir first)"
for tool in openssl curl python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install $tool)"
done

((real_node)) && real_node_preflight
parts=(etcd kubernetes kwok coredns)
# helm for the tests that install the chart on the node.
((real_node)) && parts+=(helm)
cache_bin="$("$here/build.sh" --k8s "$k8s" "${parts[@]}")" || exit 2
# This cluster's binaries, by version.
bin="$dir/bin"
mkdir -p "$bin"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
  ln -sfn "$cache_bin/$b-$k8s" "$bin/$b"
done
ln -sfn "$cache_bin/etcd-$etcd_version" "$bin/etcd"
ln -sfn "$cache_bin/kwok-$KWOK_VERSION" "$bin/kwok"
ln -sfn "$cache_bin/coredns-$COREDNS_VERSION" "$bin/coredns"
((real_node)) && ln -sfn "$cache_bin/helm-$HELM_VERSION" "$bin/helm"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok coredns kubelet kube-proxy; do
  [[ -x "$bin/$b" ]] || die "$bin/$b was not built"
done
if ((real_node)); then
  # Every image first (podns's is the release build of this tree): a build
  # that fails leaves nothing started.
  "$here/images.sh" "$dir/images" || die "the images did not build (tests/cluster/images.sh $dir/images)"
  # shellcheck disable=SC1091
  . "$dir/images/images.env"
fi

mkdir -p "$dir/pki" "$dir/logs" "$dir/etcd"
log() { echo "up: $*" >&2; }

# A free port on 127.0.0.1 (the kernel picks it; the small race with
# another process is acceptable for a test cluster).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# --- PKI: one CA, the API server's serving certificate, client
# certificates per component, the service-account signing key.
pki="$dir/pki"
cert() { # name subject [san]
  local name="$1" subj="$2" san="${3:-}"
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  local ext="$pki/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$san" ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}
if [[ ! -f "$pki/ca.crt" ]]; then
  log "certificates"
  openssl genrsa -out "$pki/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -days 3650 -subj "/CN=podns-test-ca" -out "$pki/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:$RN_NODE_IP,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=podns-test-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kwok "/O=system:masters/CN=kwok"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi

((real_node)) && real_node_pki "$pki"

etcd_port="$(free_port)"; etcd_peer="$(free_port)"; api_port="$(free_port)"
kcm_port="$(free_port)"; sched_port="$(free_port)"; kwok_port="$(free_port)"
api_ip=127.0.0.1
((real_node)) && api_ip="$RN_NODE_IP"
api="https://$api_ip:$api_port"

kubeconfig() { # file user
  local file="$1" user="$2"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $api
    certificate-authority: $pki/ca.crt
users:
- name: $user
  user:
    client-certificate: $pki/$user.crt
    client-key: $pki/$user.key
contexts:
- name: local
  context: {cluster: local, user: $user}
current-context: local
EOF
}
kubeconfig "$dir/kubeconfig" admin
kubeconfig "$dir/controller-manager.kubeconfig" controller-manager
kubeconfig "$dir/scheduler.kubeconfig" scheduler
kubeconfig "$dir/kwok.kubeconfig" kwok
if ((real_node)); then
  kubeconfig "$dir/kubelet.kubeconfig" kubelet
  kubeconfig "$dir/kube-proxy.kubeconfig" kube-proxy
fi

pids=()
start() { # NAME command…
  local name="$1"; shift
  setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  pids+=("$name:$pid")
  echo "$pid" >"$dir/$name.pid"
}
write_env() {
  {
    echo "KUBECONFIG=$dir/kubeconfig"
    echo "K8S_VERSION=$k8s"
    echo "KUBECTL=$bin/kubectl"
    echo "COREDNS=$bin/coredns"
    echo "CLUSTER_BIN=$bin"
    echo "ETCD_URL=http://127.0.0.1:$etcd_port"
    echo "APISERVER_URL=$api"
    echo "CLUSTER_CA=$pki/ca.crt"
    echo "CLUSTER_DIR=$dir"
    if ((real_node)); then
      echo "REAL_NODE=$RN_NODE"
      echo "REAL_NODE_IP=$RN_NODE_IP"
      echo "REAL_NODE_POD_CIDR=${pod_cidr:-}"
      echo "CONTAINERD_SOCK=$dir/node/containerd/containerd.sock"
      echo "CLUSTER_DNS=$RN_DNS_IP"
      echo "IMAGES_DIR=$dir/images"
      cat "$dir/images/images.env"
    fi
    for p in "${pids[@]}"; do
      local n="${p%%:*}"
      echo "$(echo "$n" | tr 'a-z-' 'A-Z_')_PID=${p##*:}"
    done
    echo "export K8S_VERSION KUBECONFIG KUBECTL COREDNS CLUSTER_BIN ETCD_URL APISERVER_URL CLUSTER_CA CLUSTER_DIR"
  } >"$dir/env"
}
fail() {
  write_env
  echo "tests/cluster/up.sh: $* (logs: $dir/logs; stopping what started)" >&2
  "$here/down.sh" "$dir" >/dev/null 2>&1 || true
  exit 1
}
wait_for() { # what seconds command…
  local what="$1" secs="$2"; shift 2
  local until=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < until)) || fail "$what not healthy after ${secs}s"
    sleep 0.5
  done
}

if ((real_node)); then
  log "the real node's network: $RN_NODE_IF ($RN_NODE_IP), routes, iptables chain $RN_CHAIN"
  echo "REAL_NODE=$RN_NODE" >"$dir/env"
  real_node_network_up "$dir" || fail "could not set up the real node's network"
fi

log "Kubernetes $k8s, etcd $etcd_version"
log "etcd on 127.0.0.1:$etcd_port"
start etcd "$bin/etcd" --name podns-test --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "podns-test=http://127.0.0.1:$etcd_peer" --log-level warn --quota-backend-bytes 8589934592
write_env
wait_for etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"

log "kube-apiserver on $api"
apiserver_args=(
  --bind-address "$api_ip" --advertise-address "$api_ip" --secure-port "$api_port"
  --etcd-servers "http://127.0.0.1:$etcd_port"
  --client-ca-file "$pki/ca.crt"
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
  --authorization-mode Node,RBAC
  --service-account-issuer https://kubernetes.default.svc.cluster.local
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
  --service-cluster-ip-range 10.96.0.0/16,fd00:96::/108
  --allow-privileged=true --enable-priority-and-fairness=true
  --profiling=false --v=1
)
if ((real_node)); then
  # The `kubernetes` Service's endpoint is this address (pods reach the API
  # server there through kube-proxy); the kubelet serves logs and exec.
  apiserver_args+=(--endpoint-reconciler-type=lease
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt"
    --kubelet-client-key "$pki/apiserver-kubelet-client.key"
    --kubelet-preferred-address-types InternalIP)
else
  apiserver_args+=(--endpoint-reconciler-type=none)
fi
echo "${apiserver_args[*]}" >"$dir/apiserver.args"
start apiserver "$bin/kube-apiserver" "${apiserver_args[@]}"
write_env
wait_for kube-apiserver 120 "$bin/kubectl" --kubeconfig "$dir/kubeconfig" get --raw /readyz

log "kube-controller-manager and kube-scheduler"
# No node IPAM: kwok's Nodes bring their own 10.(128+i).0.0/16 and
# real-node.sh sets the real node's, so a Node a test makes without one
# keeps none.
start controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$dir/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" \
  --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --service-cluster-ip-range 10.96.0.0/16,fd00:96::/108 \
  --controllers "$kcm_controllers" --leader-elect=false --v=1
start scheduler "$bin/kube-scheduler" \
  --kubeconfig "$dir/scheduler.kubeconfig" \
  --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
  --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false --v=1

# kwok's own pod stages (from its module source, which build.sh fetched):
# pod-ready and pod-delete, but not pod-complete, which would finish every
# Job's pods at once; training pods run until they are deleted or fail.
kwok_src="$(cd "$here" && go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage/pod/fast"
[[ -f "$kwok_src/pod-ready.yaml" ]] || (cd /tmp && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION") >/dev/null 2>&1
[[ -f "$kwok_src/pod-ready.yaml" && -f "$kwok_src/pod-delete.yaml" ]] ||
  die "kwok's stage files are missing from the module cache ($kwok_src)"
{ cat "$kwok_src/pod-ready.yaml"; echo "---"; cat "$kwok_src/pod-delete.yaml"; } >"$dir/kwok-stages.yaml"

log "kwok with $nodes fake nodes"
start kwok "$bin/kwok" --kubeconfig "$dir/kwok.kubeconfig" --config "$dir/kwok-stages.yaml" \
  --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --cidr 10.0.0.0/16 --node-ip 10.255.0.1 \
  --server-address "127.0.0.1:$kwok_port"
write_env
wait_for kube-controller-manager 60 curl -skf "https://127.0.0.1:$kcm_port/healthz"
wait_for kube-scheduler 60 curl -skf "https://127.0.0.1:$sched_port/healthz"
wait_for kwok 60 curl -sf "http://127.0.0.1:$kwok_port/healthz"

for ((i = 0; i < nodes; i++)); do
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    # GPU nodes as a training cluster labels them, so the simulator's
    # training pods (GPU node selector and affinity, 8 GPUs, 8 RDMA
    # devices, ~1.5 TiB each) schedule here unchanged.
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
    topology.kubernetes.io/zone: zone-a
spec:
  podCIDR: 10.$((128 + i)).0.0/16
  podCIDRs: [10.$((128 + i)).0.0/16]
status:
  allocatable: {cpu: "10000", memory: 64Ti, ephemeral-storage: 64Ti, nvidia.com/gpu: "512", rdma/ib: "512", pods: "100000"}
  capacity: {cpu: "10000", memory: 64Ti, ephemeral-storage: 64Ti, nvidia.com/gpu: "512", rdma/ib: "512", pods: "100000"}
---
EOF
done | "$bin/kubectl" --kubeconfig "$dir/kubeconfig" apply -f - >/dev/null || fail "could not create the kwok nodes"

nodes_ready() {
  local ready
  ready="$("$bin/kubectl" --kubeconfig "$dir/kubeconfig" get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)"
  [[ "$ready" -eq "$nodes" ]]
}
wait_for "kwok nodes" 60 nodes_ready
# The default ServiceAccount in default (the service-account controller
# makes it): pods can be created only once it exists.
wait_for "default ServiceAccount" 60 "$bin/kubectl" --kubeconfig "$dir/kubeconfig" get serviceaccount default -n default
write_env
((real_node)) && real_node_up
write_env
log "ready: . $dir/env && \$KUBECTL get --raw /readyz"
