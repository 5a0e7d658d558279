# shellcheck shell=bash
# The real node of tests/cluster/up.sh DIR --real-node, and its teardown in
# tests/cluster/down.sh: sourced by both, not run on its own.
#
# One node, "podns-real-node", beside kwok's fake ones:
#   containerd  Debian's, its own config, root, state and socket under DIR,
#               runc (cgroupfs), the CNI bridge and host-local plugins from
#               /usr/lib/cni on the node's podCIDR RN_POD_CIDR, which this
#               script sets on the Node once the kubelet registers it
#               (containerd renders the conflist from a template
#               when the kubelet hands it the podCIDR), every image imported
#               from DIR/images (tests/cluster/images.sh) before the kubelet
#               starts; a pull would go to 127.0.0.1:1 (registry hosts file)
#   kubelet     cgroupfs, --cluster-dns 10.96.0.10, --cluster-domain
#               cluster.local, root dir, certificates and pod logs under DIR,
#               the taint podns.test/real-node:NoSchedule and the label
#               podns.test/real-node=true (tests' pods choose the node; other
#               tests' pods stay on kwok's)
#   kube-proxy  iptables mode, so ClusterIP Services route
#   CoreDNS     the cluster DNS (kube-dns, 10.96.0.10) as pods, with a
#               local stand-in for the upstream resolver
#
# The network (one real node per machine: these names are fixed):
#   podnsnode0  an empty bridge holding the node IP 172.31.250.1/32, where
#               the kubelet and kube-apiserver listen (a kubelet refuses a
#               loopback node IP, and pods reach the API server through the
#               `kubernetes` Service, whose endpoint this is); the Service
#               range 10.96.0.0/16 is routed to it too, so a ClusterIP that
#               kube-proxy does not translate is dropped here instead of
#               leaving the machine (kwok's pod ranges are not: 10.128.0.0/9
#               may hold the machine's own resolver)
#   podnscni0   the CNI bridge of the pods (ipMasq off: nothing is NATed out)
#   PODNS-TEST-FWD  an iptables chain first in FORWARD that rejects whatever
#               the pods send to any interface but their own bridge, so
#               pods reach only each other, this node and loopback
# (This kernel has no dummy interface driver, so empty bridges hold the
# addresses.)
#
# The kubelet and the bridge plugin change some host sysctls (ip_forward,
# bridge-nf-call-iptables, and the kubelet's kernel defaults); they are
# saved in DIR/node/sysctl.before and put back by down.sh.

RN_NODE=podns-real-node
RN_NODE_IP=172.31.250.1
RN_NODE_IF=podnsnode0
RN_CNI_IF=podnscni0
RN_CHAIN=PODNS-TEST-FWD
RN_CLUSTER_CIDR=10.128.0.0/9
# The real node's podCIDR, inside RN_CLUSTER_CIDR and apart from kwok's
# 10.(128+i).0.0/16. Set on the Node by this script, not by
# kube-controller-manager's node IPAM: with IPAM on, every Node would get a
# range, and the tests need Nodes without one (pods outside every Node's
# range, as with Calico's or Cilium's own IPAM).
RN_POD_CIDR=10.254.0.0/16
RN_SERVICE_CIDR=10.96.0.0/16
RN_DNS_IP=10.96.0.10
RN_TAINT=podns.test/real-node
RN_SYSCTLS=(
  net.ipv4.ip_forward net.ipv6.conf.all.forwarding
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait
)

# Everything the real node needs, checked before anything starts: the first
# part missing is named with how to install it, and up.sh exits 2.
real_node_preflight() {
  local miss=""
  need() { # what how
    [[ -n "$miss" ]] || miss="$1 ($2)"
  }
  [[ "$(id -u)" -eq 0 ]] || need "root" "the real node runs containerd, a kubelet and iptables: run as root"
  command -v containerd >/dev/null 2>&1 || need "containerd" "apt-get install containerd"
  command -v ctr >/dev/null 2>&1 || need "ctr" "apt-get install containerd"
  command -v runc >/dev/null 2>&1 || [[ -x /usr/sbin/runc ]] || need "runc" "apt-get install runc"
  local p
  for p in bridge host-local loopback; do
    [[ -x "/usr/lib/cni/$p" ]] || need "the CNI plugin /usr/lib/cni/$p" "apt-get install containernetworking-plugins"
  done
  for p in iptables iptables-save ip6tables; do
    command -v "$p" >/dev/null 2>&1 || need "$p" "apt-get install iptables"
  done
  command -v conntrack >/dev/null 2>&1 || need "conntrack" "apt-get install conntrack"
  command -v ip >/dev/null 2>&1 || need "ip" "apt-get install iproute2"
  command -v busybox >/dev/null 2>&1 || need "busybox" "apt-get install busybox-static"
  command -v cc >/dev/null 2>&1 || need "a C compiler" "apt-get install gcc libc6-dev"
  command -v cargo >/dev/null 2>&1 || need "cargo" "the podns image is built from this tree: install Rust (rustup.rs)"
  # The kubelet's cgroup checks: v1 needs these controllers mounted (v2
  # needs them enabled in the unified hierarchy's root).
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    for p in cpu cpuset memory pids; do
      grep -qw "$p" /sys/fs/cgroup/cgroup.controllers ||
        need "cgroup v2 controller $p" "enable it in /sys/fs/cgroup/cgroup.subtree_control; the kubelet refuses to start without it"
    done
  else
    for p in cpu cpuacct cpuset memory pids; do
      [[ -f "/sys/fs/cgroup/$p/cgroup.procs" ]] ||
        need "cgroup v1 controller $p at /sys/fs/cgroup/$p" "mount -t cgroup -o $p cgroup /sys/fs/cgroup/$p (or boot with cgroup v2); the kubelet refuses to start without it"
    done
  fi
  [[ -d /proc/sys/net/bridge ]] || need "bridge netfilter (/proc/sys/net/bridge)" "modprobe br_netfilter: Services between pods on one bridge need it"
  if [[ -z "$miss" ]]; then
    for p in "$RN_NODE_IF" "$RN_CNI_IF"; do
      ip link show "$p" >/dev/null 2>&1 &&
        need "a free interface name $p" "another real node is up or was not torn down: tests/cluster/down.sh ITS_DIR, or ip link del $p"
    done
  fi
  [[ -z "$miss" ]] || die "the real node needs $miss"
}

# The host side that must exist before kube-apiserver binds the node IP.
real_node_network_up() {
  local dir="$1" s
  mkdir -p "$dir/node"
  for s in "${RN_SYSCTLS[@]}"; do
    [[ -r "$(rn_sysctl "$s")" ]] && echo "$s=$(cat "$(rn_sysctl "$s")")"
  done >"$dir/node/sysctl.before"
  # Directories the kubelet and containerd make outside DIR (the shims'
  # sockets are always under /run/containerd/s), removed by down.sh if
  # they were not there before.
  [[ -d /var/log/containers ]] || touch "$dir/node/varlog-containers.made"
  [[ -d /run/containerd ]] || touch "$dir/node/run-containerd.made"
  ip link add "$RN_NODE_IF" type bridge
  ip addr add "$RN_NODE_IP/32" dev "$RN_NODE_IF"
  ip link set "$RN_NODE_IF" up
  ip route add "$RN_SERVICE_CIDR" dev "$RN_NODE_IF"
  # Pods and Services on one bridge: the bridge's frames pass iptables, so
  # a reply from a Service's pod is translated back.
  echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
  iptables -N "$RN_CHAIN"
  iptables -A "$RN_CHAIN" -i "$RN_CNI_IF" ! -o "$RN_CNI_IF" -j REJECT \
    -m comment --comment "podns test node: pods reach only their bridge, this node and loopback"
  iptables -I FORWARD 1 -j "$RN_CHAIN"
}

real_node_pki() {
  local pki="$1"
  [[ -f "$pki/kubelet.crt" ]] && return 0
  cert kubelet "/O=system:nodes/CN=system:node:$RN_NODE"
  cert kube-proxy "/CN=system:kube-proxy"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
}

real_node_configs() {
  local dir="$1" kubelet_port="$2" kubelet_healthz="$3" proxy_healthz="$4" proxy_metrics="$5"
  local n="$dir/node"
  mkdir -p "$n/containerd/certs.d/docker.io" "$n/containerd/certs.d/registry.k8s.io" "$n/cni/net.d" \
    "$n/kubelet" "$n/pod-logs" "$n/volume-plugins"
  local h
  for h in docker.io registry.k8s.io; do
    # Nothing may be pulled: a pull of any image the tests name would go here.
    printf 'server = "http://127.0.0.1:1"\n' >"$n/containerd/certs.d/$h/hosts.toml"
  done
  cat >"$n/containerd/config.toml" <<EOF
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$n/containerd/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine refuses a lower oom_score_adj: without this every sandbox
  # fails with runc's "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$n/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni/net.d"
    conf_template = "$n/cni/template.conflist"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$n/containerd/certs.d"
EOF
  # containerd renders this into conf_dir once the kubelet passes the
  # node's podCIDR (RN_POD_CIDR, set on the Node below).
  cat >"$n/cni/template.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "podns-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$RN_CNI_IF",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n/cni/ipam",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
  cat >"$n/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $RN_NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$RN_DNS_IP]
clusterDomain: cluster.local
# No host resolver for pods: dnsPolicy Default gets no nameserver.
resolvConf: ""
containerRuntimeEndpoint: unix://$n/containerd/containerd.sock
podLogsDir: $n/pod-logs
volumePluginDir: $n/volume-plugins
# Preloaded images are all there is: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A test node shares the machine's disk, which CI fills to a few percent
# free: a disk-pressure taint would stop scheduling and evict the tests'
# pods. "0%" switches a signal off (the kubelet ignores 0% and 100%); every
# disk signal is named, as 1.37 merges defaults into a partial map.
evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  imagefs.inodesFree: "0%"
registerWithTaints:
  - {key: $RN_TAINT, value: "true", effect: NoSchedule}
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
shutdownGracePeriod: 0s
EOF
  cat >"$n/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: $RN_NODE
mode: iptables
clusterCIDR: $RN_CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
nodePortAddresses: ["$RN_NODE_IP/32"]
iptables: {localhostNodePorts: false}
# Leave the host's conntrack settings and oom_score_adj as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
oomScoreAdj: 0
EOF
}

real_node_ctr() { # dir ctr-args…
  local dir="$1"
  shift
  ctr -a "$dir/node/containerd/containerd.sock" -n k8s.io "$@"
}

# The cluster DNS the kubelet names (kube-dns, 10.96.0.10): CoreDNS, two
# replicas as kubeadm runs it, on the real node. Its upstream is a stand-in
# on loopback in the same pods (`example.test` and nothing else), never the
# host's resolver.
real_node_coredns_yaml() {
  cat <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "podns-test:coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "podns-test:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "podns-test:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        prometheus :9153
        # The upstream: a stand-in on loopback, never the host's resolver.
        forward . 127.0.0.1:5300
        cache 30 {
            disable success cluster.local
            disable denial cluster.local
        }
        loop
        reload 2s
        loadbalance
    }
    # The stand-in upstream: one external-looking zone, answered here.
    example.test:5300 {
        bind 127.0.0.1
        hosts {
            192.0.2.80 www.example.test
        }
    }
    .:5300 {
        bind 127.0.0.1
        template ANY ANY {
            rcode NXDOMAIN
        }
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 2
  selector: {matchLabels: {k8s-app: kube-dns}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      nodeSelector: {$RN_TAINT: "true"}
      tolerations: [{key: $RN_TAINT, operator: Exists}]
      containers:
        - name: coredns
          image: $COREDNS_IMAGE
          imagePullPolicy: Never
          args: [-conf, /etc/coredns/Corefile]
          ports:
            - {name: dns, containerPort: 53, protocol: UDP}
            - {name: dns-tcp, containerPort: 53, protocol: TCP}
            - {name: metrics, containerPort: 9153, protocol: TCP}
          resources:
            requests: {cpu: 50m, memory: 70Mi}
            limits: {memory: 170Mi}
          livenessProbe:
            httpGet: {path: /health, port: 8080}
            initialDelaySeconds: 10
            periodSeconds: 10
            failureThreshold: 5
          readinessProbe:
            httpGet: {path: /ready, port: 8181}
            periodSeconds: 2
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
          volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: $RN_DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
    - {name: dns, port: 53, protocol: UDP, targetPort: 53}
    - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
    - {name: metrics, port: 9153, protocol: TCP, targetPort: 9153}
EOF
}

# The node itself, once the control plane and kwok's nodes are up (called
# by up.sh, with its start, wait_for, fail, log and free_port).
real_node_up() {
  local n="$dir/node" kubectl=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")
  real_node_configs "$dir" "$(free_port)" "$(free_port)" "$(free_port)" "$(free_port)"
  local proxy_healthz kubelet_healthz
  proxy_healthz="$(sed -n 's/^healthzBindAddress: //p' "$n/kube-proxy.yaml")"
  kubelet_healthz="127.0.0.1:$(sed -n 's/^healthzPort: //p' "$n/kubelet/config.yaml")"

  log "containerd ($n/containerd/containerd.sock)"
  start containerd containerd --config "$n/containerd/config.toml"
  write_env
  wait_for containerd 60 real_node_ctr "$dir" version
  log "importing images"
  local img
  for img in "$dir"/images/*.tar; do
    real_node_ctr "$dir" images import --snapshotter overlayfs "$img" >>"$dir/logs/ctr-import.log" 2>&1 ||
      fail "ctr images import $img failed (log: $dir/logs/ctr-import.log)"
  done
  # Each image also by its digest (REPO@sha256:…), the name the CRI looks up
  # for a pod that names the image by digest.
  local var ref digest
  for var in $(sed -n 's/^\([A-Z]*\)_IMAGE=.*/\1/p' "$dir/images/images.env"); do
    ref="$(sed -n "s/^${var}_IMAGE=//p" "$dir/images/images.env")"
    digest="$(sed -n "s/^${var}_DIGEST=//p" "$dir/images/images.env")"
    real_node_ctr "$dir" images tag --force "$ref" "${ref%:*}@$digest" >>"$dir/logs/ctr-import.log" 2>&1 ||
      fail "ctr images tag $ref ${ref%:*}@$digest failed"
  done

  log "kubelet ($RN_NODE on $RN_NODE_IP)"
  start kubelet "$bin/kubelet" --config "$n/kubelet/config.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
    --hostname-override "$RN_NODE" --node-ip "$RN_NODE_IP" --node-labels "$RN_TAINT=true" \
    --root-dir "$n/kubelet/root" --cert-dir "$n/kubelet/pki" --v=1
  write_env
  wait_for kubelet 60 curl -sf "http://$kubelet_healthz/healthz"
  node_registered() { "${kubectl[@]}" get node "$RN_NODE" >/dev/null 2>&1; }
  wait_for "the real node registered" 60 node_registered
  "${kubectl[@]}" patch node "$RN_NODE" --type merge \
    -p "{\"spec\":{\"podCIDR\":\"$RN_POD_CIDR\",\"podCIDRs\":[\"$RN_POD_CIDR\"]}}" >/dev/null ||
    fail "could not set the real node's podCIDR"
  node_ready() {
    [[ "$("${kubectl[@]}" get node "$RN_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
  }
  wait_for "the real node (Ready)" 120 node_ready
  pod_cidr="$("${kubectl[@]}" get node "$RN_NODE" -o jsonpath='{.spec.podCIDR}')"
  [[ -n "$pod_cidr" ]] || fail "the real node has no podCIDR"

  log "kube-proxy"
  start kube-proxy "$bin/kube-proxy" --config "$n/kube-proxy.yaml" --v=1
  write_env
  wait_for kube-proxy 60 curl -sf "http://$proxy_healthz/healthz"

  log "CoreDNS as the cluster DNS ($RN_DNS_IP)"
  real_node_coredns_yaml | "${kubectl[@]}" apply -f - >/dev/null || fail "could not create CoreDNS"
  "${kubectl[@]}" -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null ||
    fail "CoreDNS did not become ready"
}

# --- teardown (down.sh) -----------------------------------------------------

rn_sysctl() { echo "/proc/sys/${1//.//}"; }

# Every KUBE-* chain of IPT (iptables or ip6tables) in every table, and the
# rules of built-in chains that jump to one.
rn_drop_kube_chains() {
  local ipt="$1" table rule chain
  for table in filter nat mangle raw; do
    "$ipt-save" -t "$table" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -vE '^-A KUBE-' |
      while IFS= read -r rule; do
        # shellcheck disable=SC2086
        eval "$ipt -t $table -D ${rule#-A }" 2>/dev/null
      done
    for chain in $("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[A-Za-z0-9_-]*\) .*/\1/p'); do
      "$ipt" -t "$table" -F "$chain" 2>/dev/null
    done
    for chain in $("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[A-Za-z0-9_-]*\) .*/\1/p'); do
      "$ipt" -t "$table" -X "$chain" 2>/dev/null
    done
  done
}

rn_alive() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$st" && "$st" != Z ]]
}

rn_stop_pid() { # pid seconds
  local p="$1" until=$((SECONDS + $2))
  [[ -n "$p" ]] || return 0
  rn_alive "$p" || return 0
  kill -TERM "$p" 2>/dev/null
  while rn_alive "$p" && ((SECONDS < until)); do sleep 0.2; done
  rn_alive "$p" && kill -KILL "$p" 2>/dev/null
  while rn_alive "$p"; do sleep 0.1; done
}

# Processes whose command line names this node's containerd socket: its
# shims (containerd-shim-runc-v2 -address SOCK …).
rn_shims() {
  local sock="$1" f
  for f in /proc/[0-9]*/cmdline; do
    { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -qF -- "-address $sock " && basename "$(dirname "$f")"
  done
}

# Every cgroup directory the kubelet and runc made, deepest first.
rn_cgroups() {
  local root
  for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/kubepods.slice; do
    [[ -d "$root" ]] && find "$root" -depth -type d
  done
}

# Stops the real node and removes everything of it; prints what it checked
# and returns non-zero when something is left.
real_node_down() {
  local dir="$1" n="$1/node"
  local sock="$n/containerd/containerd.sock" t0=$SECONDS
  say() { echo "down: $* ($((SECONDS - t0)) s)" >&2; }
  # 1. The kubelet first, so nothing restarts what goes next.
  rn_stop_pid "${KUBELET_PID:-}" 20
  say "kubelet stopped"
  # 2. The pods: every task killed and deleted through containerd (its shim
  # then exits), while containerd still runs.
  if [[ -S "$sock" ]] && rn_alive "${CONTAINERD_PID:-0}"; then
    local t
    for t in $(real_node_ctr "$dir" tasks ls -q 2>/dev/null); do
      real_node_ctr "$dir" tasks kill -s SIGKILL "$t" >/dev/null 2>&1
    done
    for t in $(real_node_ctr "$dir" tasks ls -q 2>/dev/null); do
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        real_node_ctr "$dir" tasks delete "$t" >/dev/null 2>&1 && break
        sleep 0.3
      done
    done
    for t in $(real_node_ctr "$dir" containers ls -q 2>/dev/null); do
      real_node_ctr "$dir" containers delete "$t" >/dev/null 2>&1
    done
  fi
  # 3. containerd, then whatever outlived it: processes left in the pods'
  # cgroups, and shims of this socket.
  say "pods' tasks deleted"
  rn_stop_pid "${CONTAINERD_PID:-}" 20
  say "containerd stopped"
  local cg p
  for cg in $(rn_cgroups); do
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  for p in $(rn_shims "$sock"); do kill -KILL "$p" 2>/dev/null; done
  # 4. kube-proxy, and its rules.
  rn_stop_pid "${KUBE_PROXY_PID:-}" 10
  if [[ -x "${CLUSTER_BIN:-}/kube-proxy" ]]; then
    "$CLUSTER_BIN/kube-proxy" --cleanup --v=0 >"$dir/logs/kube-proxy-cleanup.log" 2>&1 || true
  fi
  # 5. Mounts under DIR (overlay rootfs, shm, netns, the kubelet's volumes),
  # deepest first: a netns whose mount is gone takes its veth along.
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$dir/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  # 6. Cgroups, now empty (a cgroup empties a moment after its last task).
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    for cg in $(rn_cgroups); do rmdir "$cg" 2>/dev/null; done
    [[ -z "$(rn_cgroups)" ]] && break
    sleep 0.3
  done
  say "kube-proxy stopped and its rules removed; mounts and cgroups removed"
  # 7. Interfaces, routes (they go with podnsnode0), iptables rules.
  local ifc
  for ifc in "$RN_CNI_IF" "$RN_NODE_IF" podns0; do
    ip link show "$ifc" >/dev/null 2>&1 && ip link del "$ifc" 2>/dev/null
  done
  for ifc in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do
    # A veth still attached to the pods' bridge would have gone with it;
    # one left in the host namespace names this node's bridge as master.
    ip -d link show "$ifc" 2>/dev/null | grep -q "master $RN_CNI_IF" && ip link del "$ifc" 2>/dev/null
  done
  iptables -D FORWARD -j "$RN_CHAIN" 2>/dev/null
  iptables -F "$RN_CHAIN" 2>/dev/null && iptables -X "$RN_CHAIN" 2>/dev/null
  # The kubelet's own chains (kube-proxy --cleanup removed kube-proxy's).
  local ipt
  for ipt in iptables ip6tables; do rn_drop_kube_chains "$ipt"; done
  # 8. Connection tracking of the pods' and Services' addresses.
  local pod_cidr
  pod_cidr="$(sed -n 's/^REAL_NODE_POD_CIDR=//p' "$dir/env" 2>/dev/null)"
  for p in ${pod_cidr:+$pod_cidr} "$RN_SERVICE_CIDR" "$RN_NODE_IP/32"; do
    conntrack -D -s "$p" >/dev/null 2>&1
    conntrack -D -d "$p" >/dev/null 2>&1
  done
  # 9. Host settings as they were, and the kubelet's files outside DIR.
  if [[ -f "$n/sysctl.before" ]]; then
    local kv
    while IFS= read -r kv; do
      [[ "$(cat "$(rn_sysctl "${kv%%=*}")" 2>/dev/null)" == "${kv#*=}" ]] ||
        echo "${kv#*=}" >"$(rn_sysctl "${kv%%=*}")" 2>/dev/null
    done <"$n/sysctl.before"
  fi
  local l
  for l in /var/log/containers/*; do
    [[ -L "$l" && "$(readlink "$l")" == "$dir/"* ]] && rm -f "$l"
  done
  [[ -f "$n/varlog-containers.made" ]] && rmdir /var/log/containers 2>/dev/null
  [[ -f "$n/run-containerd.made" && -d /run/containerd ]] &&
    find /run/containerd -depth -type d -empty -delete 2>/dev/null

  # What is left, checked (each line a place looked at).
  local left=()
  for ifc in "$RN_CNI_IF" "$RN_NODE_IF" podns0; do
    ip link show "$ifc" >/dev/null 2>&1 && left+=("interface $ifc")
  done
  ip -o link show type veth 2>/dev/null | grep -q "master $RN_CNI_IF" && left+=("veths on $RN_CNI_IF")
  ip route show | grep -qE "^$RN_SERVICE_CIDR " && left+=("the route of $RN_SERVICE_CIDR")
  findmnt -rn -o TARGET | grep -qF "$dir/" && left+=("mounts under $dir: $(findmnt -rn -o TARGET | grep -cF "$dir/")")
  for ipt in iptables ip6tables; do
    "$ipt-save" 2>/dev/null | grep -qE "KUBE-|CNI-|$RN_CHAIN" && left+=("$ipt rules: $("$ipt-save" | grep -cE "KUBE-|CNI-|$RN_CHAIN")")
  done
  [[ -n "$(rn_cgroups)" ]] && left+=("cgroups: $(rn_cgroups | head -3 | tr '\n' ' ')")
  [[ -n "$(rn_shims "$sock")" ]] && left+=("containerd shims: $(rn_shims "$sock" | tr '\n' ' ')")
  for p in ${KUBELET_PID:-} ${CONTAINERD_PID:-} ${KUBE_PROXY_PID:-}; do
    rn_alive "$p" && left+=("process $p")
  done
  if [[ -f "$n/sysctl.before" ]]; then
    while IFS= read -r kv; do
      [[ "$(cat "$(rn_sysctl "${kv%%=*}")" 2>/dev/null)" == "${kv#*=}" ]] || left+=("sysctl ${kv%%=*}")
    done <"$n/sysctl.before"
  fi
  [[ -f "$n/run-containerd.made" && -e /run/containerd ]] && left+=("/run/containerd: $(find /run/containerd | head -3 | tr '\n' ' ')")
  compgen -G "/var/log/containers/*" >/dev/null && for l in /var/log/containers/*; do
    [[ "$(readlink "$l")" == "$dir/"* ]] && left+=("log link $l")
  done
  echo "down: real node checked: interfaces $RN_CNI_IF $RN_NODE_IF podns0 and veths, routes, mounts under $dir, iptables/ip6tables KUBE-/CNI-/$RN_CHAIN rules, kubepods cgroups, shims and kubelet/containerd/kube-proxy processes, sysctls (${#RN_SYSCTLS[@]}), /var/log/containers links, /run/containerd" >&2
  if ((${#left[@]})); then
    printf 'down: left behind: %s\n' "${left[@]}" >&2
    return 1
  fi
  return 0
}
