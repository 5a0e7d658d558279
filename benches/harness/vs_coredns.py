"""podns against CoreDNS on the same real control plane, in one run.

    C=$(mktemp -d); tests/cluster/up.sh $C 4
    cargo build --release
    python3 benches/harness/vs_coredns.py --cluster $C --podns target/release/podns \
        --out benches/harness/results/vs-coredns-$(git rev-parse --short HEAD)

The cluster is tests/cluster/up.sh's: kube-apiserver, kube-controller-manager
(the real EndpointSlice controller, with the release's default client QPS),
kube-scheduler, etcd and kwok on loopback. CoreDNS is the release pinned in
tests/cluster/versions.env with its `kubernetes` plugin as a cluster runs it
(`endpoint_pod_names`; a second CoreDNS with `pods verified`); podns runs
with its defaults. Everything is on 127.0.0.1; pod IPs are data. Every loop
is bounded by a deadline.

Stages (--stages; default prop,nx,qps,rss,api, the longer gang, restart and bill
are asked for by name):
  prop   time from a pod's IP status write (kwok's PATCH, seen on a watch of
         the real API server) to the right answer for its hostname name and
         to its address in its headless Service's set (over TCP), per
         server; PODS pods quiet, then again under pod churn in
         another namespace (CHURN pod creates+deletes per second). A row
         counts the EndpointSlice controller's requeues of the namespace's
         Service for an out-of-date informer (its log's "EndpointSlice
         informer cache is out of date"): each is a wait with backoff that
         CoreDNS, reading slices, waits out too.
  nx     a name asked before its pod exists (a resolver in front: CoreDNS
         `cache 30` forwarding to each server caches the NXDOMAIN for the
         server's SOA MINIMUM, its floor lowered from 5 s to 1 s), then the
         pod is created: time from its IP status write to the first NOERROR
         with its address through the cache.
  gang   a gang as training starts it: an Indexed Job of --gang-ranks ranks
         (a headless Service over it with publishNotReadyAddresses, the
         pods' subdomain, as JobSet makes them) created through the real
         Job controller, then a gang restart (the Job deleted and made
         anew under its name, as JobSet restarts one), --gang-rounds
         times. Servers, asked at once: podns, a CoreDNS `cache 30`
         forwarding to podns (a node-local cache), and CoreDNS (the last
         --coredns build) with `cache 30`. Each rank name
         (`<job>-<i>.<job>.<ns>.svc.cluster.local`) is asked from the
         moment the Job is written (the DELETE, for a restart): rows are
         the time from that write to every rank answering its pod's
         current IP, and per rank the time from its IP status write to the
         first right answer (p50/p99), and the EndpointSlice controller's
         out-of-date-informer requeues of the gang's Service.
  rss    RSS of each server after it has synced SIZES pods (each process
         fresh, after sync), and its time from start to answering the last pod.
  qps    dnsperf at a fixed rate on one query mix (hostname names, headless
         dashed names, 10% NXDOMAIN), CPU-ms per 1,000 answers; then max QPS.
  rss and qps run in --rounds rounds at each size: podns (each build of
  --podns-build NAME=PATH, repeated, to compare builds), then each CoreDNS
  build (--coredns NAME=PATH, repeated; default the cluster's) in each
  configuration (--coredns-configs: plain, cache = `cache 30`,
  cache+multisocket = also `multisocket N`, N = --multisocket, default the
  cores), one at a time; per-round rows carry the 1-minute load, summary rows
  the median, min, max and spread, and the best CoreDNS configuration (by
  median max QPS) is named.
  benches/harness/vs_coredns_table.py turns the CSV into Markdown tables.
  restart  at each of SIZES pods, each server (the first podns build, each
         CoreDNS build in the first of --coredns-configs) fresh and synced,
         then kube-apiserver stopped and started again under it
         (tests/cluster/ctl.sh, which restarts kube-controller-manager and
         kube-scheduler too, as an upgrade does): the time from the control
         plane being back to the server answering a pod created then, that
         pod's IP status write to the answer, and the server's CPU meanwhile.
  api    API-server cost per pod change: objects written (pods and
         EndpointSlices, apiserver_request_total) and watch bytes sent
         (apiserver_watch_events_sizes), with no DNS server, podns JSON,
         podns Protobuf and CoreDNS attached in turn, for the same churn;
         each case waits first until nothing has written pods or slices
         for 5 s (after the rss stage's populate, kwok and the EndpointSlice
         controller go on for minutes, and a case measured meanwhile counts
         their events: a 2026-12-07 run read less than none).
  bill   kube-apiserver's own bill per watcher: one churn runs through the
         whole stage (--bill-rate pod mutations/s, creates and deletes of
         kwok pods in one namespace, 50 live, a headless Service over them,
         one kept-alive client), and for each case a --bill-seconds window
         is measured after the watchers are ready (+ --bill-settle s):
         none (no DNS watcher, first and last: the baseline and its drift),
         then for each N of --bill-n: podns-direct (N `podns serve` with
         --kubeconfig, as a DaemonSet without relays), coredns (N CoreDNS
         with the kubernetes plugin, `pods disabled`), relays (2 podns
         relays, N node instances behind them, --node over the kwok nodes
         in turn, each reading one relay). Real processes every one; the
         API server's CPU (utime+stime of its pid), RSS (sampled each
         second: max and end), apiserver_watch_events_sizes_sum and _total
         (all resources; bytes before TLS, as encoded for each watcher),
         and the bytes it sent on the watchers' own TCP connections
         (bytes_acked of `ss -tinp` on its side, each connection owned by
         the client pid on the other side: TLS included; the relays' for
         relays; node instances must hold none). Rows per case (bill) and
         over the baseline per watcher and per mutation (bill-sum); a
         Markdown table in OUT.md.

Writes OUT.csv (stage,server,metric,value,note) row by row and prints a summary.

    --stages bill --bill-n 50,200 --bill-seconds 300   # the API server's bill

"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnsq import parse, query  # noqa: E402
from promtext import parse as parse_metrics  # noqa: E402
from kube import Kube as KubeBase, load_env  # noqa: E402,F401


class Kube(KubeBase):
    """The real API server as cluster admin, and what the stages ask of it."""

    def metrics(self):
        return parse_metrics(self.req("GET", "/metrics"))

    def watch_ips(self, ns, seen, stop):
        """Record the first time each pod of `ns` is seen with a podIP."""
        rv = self.req("GET", f"/api/v1/namespaces/{ns}/pods?limit=1")["metadata"]["resourceVersion"]
        path = f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        r = urllib.request.Request(self.url + path)
        with urllib.request.urlopen(r, context=self.ctx, timeout=600) as f:
            for line in f:
                if stop.is_set():
                    return
                ev = json.loads(line)
                o = ev["object"]
                if ev["type"] in ("ADDED", "MODIFIED"):
                    ip = o.get("status", {}).get("podIP")
                    name = o["metadata"]["name"]
                    if ip and name not in seen:
                        seen[name] = (time.monotonic(), ip)

    def namespace(self, ns):
        self.try_req("DELETE", f"/api/v1/namespaces/{ns}")
        deadline = time.time() + 120
        while time.time() < deadline:
            r = self.try_req("GET", f"/api/v1/namespaces/{ns}")
            if isinstance(r, Exception):
                break
            time.sleep(0.5)
        self.req("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        while time.time() < deadline:
            if not isinstance(self.try_req("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default"), Exception):
                return
            time.sleep(0.2)

    def headless(self, ns, name, selector):
        self.req("POST", f"/api/v1/namespaces/{ns}/services", {
            "metadata": {"name": name},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": selector,
                     "ports": [{"name": "nccl", "port": 29500, "protocol": "TCP"}]}})

    def pod(self, ns, name, labels, hostname=None, subdomain=None, node=None):
        spec = {"containers": [{"name": "worker", "image": "fake",
                                "ports": [{"name": "nccl", "containerPort": 29500}]}]}
        if hostname:
            spec["hostname"] = hostname
            spec["subdomain"] = subdomain
        if node:
            spec["nodeName"] = node
        return self.req("POST", f"/api/v1/namespaces/{ns}/pods",
                        {"metadata": {"name": name, "labels": labels}, "spec": spec})


class KeptAlive:
    """One kept-alive connection to the API server, as a controller's client
    keeps it: a TLS handshake per request would bill the API server (and
    this harness) more than the request. Not shared between threads."""

    def __init__(self, k):
        self.k = k
        self.u = urllib.parse.urlparse(k.url)
        self.conn = None

    def status(self, method, path, body=None):
        """The response's status, or None when the connection failed twice."""
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection(self.u.hostname, self.u.port,
                                                            context=self.k.ctx, timeout=30)
                data = json.dumps(body).encode() if body is not None else None
                self.conn.request(method, path, body=data,
                                  headers={"content-type": "application/json"} if data else {})
                r = self.conn.getresponse()
                r.read()
                return r.status
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        return None


_given_ports = set()


def free_port():
    """A loopback port free for TCP and UDP both (DNS servers bind both),
    never handed out twice in a run: 100 servers started from ports found
    one at a time collided before (a port free for TCP, busy for UDP)."""
    for _ in range(1000):
        t = socket.socket()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind(("127.0.0.1", 0))
            p = t.getsockname()[1]
            u.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            t.close()
            u.close()
        if p not in _given_ports:
            _given_ports.add(p)
            return p
    raise RuntimeError("no free loopback port for TCP and UDP")


def rss_kib(pid, field="VmRSS"):
    """VmRSS (or RssAnon, RssFile: its anonymous and file-backed parts,
    the latter the binary's code pages) of pid, in KiB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class Proc:
    def __init__(self, name, argv, log_dir, env=None):
        self.name = name
        self.log = open(os.path.join(log_dir, f"{name}.log"), "w")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **(env or {})})

    @property
    def pid(self):
        return self.p.pid

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def ask(sock, port, name, timeout=0.5):
    qid, q = query(name)
    sock.sendto(q, ("127.0.0.1", port))
    sock.settimeout(timeout)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            m, _ = sock.recvfrom(65535)
        except socket.timeout:
            return None
        rid, rcode, _tc, addrs = parse(m)
        if rid == qid:
            return rcode, addrs
    return None


def ask_tcp(port, name, timeout=1.0):
    """The A addresses of one question over TCP (a large set), or []."""
    qid, q = query(name)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
            c.sendall(len(q).to_bytes(2, "big") + q)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + int.from_bytes(buf[:2], "big"):
                chunk = c.recv(65535)
                if not chunk:
                    return []
                buf += chunk
        rid, rcode, _tc, addrs = parse(buf[2:2 + int.from_bytes(buf[:2], "big")])
        return addrs if rid == qid and rcode == 0 else []
    except OSError:
        return []


def burst(sock, asks, window):
    """Send every (key, qname, port) of `asks` on the non-blocking UDP
    `sock` at once, then read answers for `window` seconds: yields
    (key, rcode, addrs) for each answer to one of them."""
    ids = {}
    for key, qname, port in asks:
        qid, q = query(qname)
        ids[qid] = key
        try:
            sock.sendto(q, ("127.0.0.1", port))
        except OSError:  # a full send buffer: asked again next cycle
            pass
    end = time.monotonic() + window
    while ids and time.monotonic() < end:
        try:
            m, _ = sock.recvfrom(65535)
        except BlockingIOError:
            time.sleep(0.0005)
            continue
        rid, rcode, _tc, addrs = parse(m)
        key = ids.pop(rid, None)
        if key is not None:
            yield key, rcode, addrs


def wait_answer(port, name, limit, want_ip=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        r = ask(s, port, name)
        if r and r[0] == 0 and r[1] and (want_ip is None or want_ip in r[1]):
            return True
        time.sleep(0.05)
    return False


def dashed(ip):
    return ip.replace(".", "-").replace(":", "-")


def last_name(ns, count):
    """The hostname name of the last pod populate() makes: a server that
    answers it has synced them all."""
    return f"p-{count - 1}.gang{(count - 1) // 1000}.{ns}.svc.cluster.local"


def load1():
    """The 1-minute load average, beside each figure: the machine is shared."""
    return open("/proc/loadavg").read().split()[0]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def spread(xs):
    """(max - min) / median, in percent."""
    m = median(xs)
    return (max(xs) - min(xs)) / m * 100 if m else 0


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Bench:
    def __init__(self, a):
        self.a = a
        self.k = Kube(a.cluster)
        self.env = load_env(a.cluster)
        self.kubeconfig = self.env["KUBECONFIG"]
        self.coredns = self.env["COREDNS"]
        # The CoreDNS builds to compare (NAME=PATH, --coredns), each in every
        # configuration of --coredns-configs; one row per build says whether
        # it has the multisocket plugin (a config that needs it is skipped
        # for a build without it, and says so).
        self.builds = [tuple(x.split("=", 1)) for x in a.coredns] or [("coredns", self.coredns)]
        self.configs = [c for c in a.coredns_configs.split(",") if c]
        for c in self.configs:
            assert set(c.split("+")) <= {"plain", "cache", "multisocket"}, f"unknown CoreDNS config {c!r}"
        self.logs = tempfile.mkdtemp(prefix="vs-coredns-")
        self.rows = []
        self.procs = []
        # Each row reaches OUT.csv as it is measured, so a run stopped early
        # (a long populate, a signal) keeps what it had.
        self.csv = open(a.out + ".csv", "w")
        self.csv.write("stage,server,metric,value,note\n")
        self.csv.flush()
        self.nodes = [n["metadata"]["name"] for n in self.k.req("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]]
        self.has_multisocket = {}
        for name, path in self.builds:
            out = subprocess.run([path, "-version"], capture_output=True, text=True).stdout.split()
            plugins = subprocess.run([path, "-plugins"], capture_output=True, text=True).stdout.split()
            self.has_multisocket[name] = "multisocket" in plugins
            self.row("meta", f"coredns-{name}", "build", out[0] if out else "?",
                     f"path={path} multisocket={'yes' if self.has_multisocket[name] else 'NO'}")

    def podns_specs(self):
        """(server name, binary, "podns") for each podns build
        (--podns-build NAME=PATH, repeated; default --podns, named podns)."""
        builds = [tuple(x.split("=", 1)) for x in self.a.podns_build]
        return [(f"podns-{n}", p, "podns") for n, p in builds] or [("podns", self.a.podns, "podns")]

    def start_spec(self, name, path, config):
        """A server of podns_specs() or coredns_specs(), started fresh."""
        if config == "podns":
            return self.start_podns(name, binary=path)
        return self.start_coredns(name, binary=path, config=config)

    def coredns_specs(self):
        """(server name, binary, config) for each build and configuration."""
        specs = []
        for name, path in self.builds:
            for c in self.configs:
                if "multisocket" in c and not self.has_multisocket[name]:
                    self.row("meta", f"coredns-{name}/{c}", "skipped", 0, "this build has no multisocket plugin")
                    continue
                specs.append((f"coredns-{name}/{c}", path, c))
        return specs

    def stale_retries(self, ns):
        """How often kube-controller-manager's EndpointSlice controller has
        put a Service of `ns` back on its queue because its own informer had
        not yet seen the slices it wrote ("EndpointSlice informer cache is
        out of date"): each is a wait with backoff before the slices change,
        which a server reading EndpointSlices (CoreDNS) waits out too."""
        log = os.path.join(self.a.cluster, "logs", "controller-manager.log")
        if not os.path.exists(log):
            return 0
        key = f'key="{ns}/'
        with open(log, errors="replace") as f:
            return sum(1 for line in f if "informer cache is out of date" in line and key in line)

    def row(self, stage, server, metric, value, note=""):
        self.rows.append((stage, server, metric, value, note))
        self.csv.write(",".join(str(x).replace(",", ";") for x in (stage, server, metric, value, note)) + "\n")
        self.csv.flush()
        print(f"{stage:5} {server:22} {metric:28} {value} {note}", flush=True)

    # --- servers
    def start_podns(self, name="podns", wire="auto", binary=None):
        dns, admin = free_port(), free_port()
        p = Proc(name, [binary or self.a.podns, "serve", f"--dns-listen=127.0.0.1:{dns}",
                        f"--admin-listen=127.0.0.1:{admin}", f"--kubeconfig={self.kubeconfig}",
                        f"--wire={wire}"], self.logs, {"RUST_LOG": "warn", "NO_COLOR": "1"})
        p.dns, p.admin = dns, admin
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as f:
                    if f.status == 200:
                        break
            except Exception:  # noqa: BLE001
                time.sleep(0.2)
        self.procs.append(p)
        return p

    def start_coredns(self, name="coredns", pods="disabled", binary=None, config="plain"):
        """CoreDNS with its kubernetes plugin as a cluster runs it; `config`
        adds `cache` (30 s, the default Corefile's) and/or `multisocket`
        (one SO_REUSEPORT socket per core, --multisocket)."""
        port = free_port()
        parts = config.split("+")
        extra = ""
        if "cache" in parts:
            extra += "    cache 30\n"
        if "multisocket" in parts:
            extra += f"    multisocket {self.a.multisocket}\n"
        cf = os.path.join(self.logs, f"{name.replace('/', '_')}.Corefile")
        with open(cf, "w") as f:
            f.write(f""".:{port} {{
    bind 127.0.0.1
    errors
{extra}    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods {pods}
        endpoint_pod_names
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
""")
        p = Proc(name.replace("/", "_"), [binary or self.coredns, "-conf", cf], self.logs)
        p.name = name
        p.dns = port
        # Ready once it answers for the API server's own Service.
        wait_answer(port, "kubernetes.default.svc.cluster.local", 120)
        self.procs.append(p)
        return p

    def start_cache(self, name, upstream):
        port = free_port()
        cf = os.path.join(self.logs, f"{name}.Corefile")
        with open(cf, "w") as f:
            f.write(f""".:{port} {{
    bind 127.0.0.1
    cache 30 {{
        success 9984 30 1
        denial 9984 30 1
    }}
    forward . 127.0.0.1:{upstream}
}}
""")
        p = Proc(name, [self.coredns, "-conf", cf], self.logs)
        p.dns = port
        time.sleep(0.5)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            p.stop()
        self.procs = []

    # --- churn in its own namespace: pod creates and deletes at RATE/s
    # --- stage prop
    def prop(self, servers, label):
        ns = f"h2h-prop-{label}"
        self.k.namespace(ns)
        self.k.headless(ns, "gang", {"app": "gang"})
        seen, stop = {}, threading.Event()
        t = threading.Thread(target=self.k.watch_ips, args=(ns, seen, stop), daemon=True)
        t.start()
        time.sleep(0.5)
        retries = self.stale_retries(ns)  # a namespace of that name may have been here before
        n = self.a.pods
        first = {s.name: {} for s in servers}
        first_set = {s.name: {} for s in servers}
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)

        def creator():
            gap = 1.0 / self.a.create_rate
            for i in range(n):
                self.k.try_req("POST", f"/api/v1/namespaces/{ns}/pods", {
                    "metadata": {"name": f"g-{i}", "labels": {"app": "gang"}},
                    "spec": {"hostname": f"g-{i}", "subdomain": "gang",
                             "nodeName": self.nodes[i % len(self.nodes)],
                             "containers": [{"name": "w", "image": "fake"}]}})
                time.sleep(gap)

        ct = threading.Thread(target=creator, daemon=True)
        ct.start()
        deadline = time.monotonic() + n / self.a.create_rate + 120
        pending = {}
        while time.monotonic() < deadline:
            for name, (t0, ip) in list(seen.items()):
                for s in servers:
                    if name not in first[s.name]:
                        pending[(s.name, s.dns, name, "host")] = (f"{name}.gang.{ns}.svc.cluster.local", ip)

            # Set membership: one TCP question for the whole headless set
            # per server and cycle (a dashed member name is not comparable:
            # CoreDNS with endpoint_pod_names names a member by hostname).
            for s in servers:
                want = [p for p in list(seen) if p not in first_set[s.name]]
                if not want:
                    continue
                got = ask_tcp(s.dns, f"gang.{ns}.svc.cluster.local")
                now = time.monotonic()
                for p in want:
                    if seen[p][1] in got:
                        first_set[s.name][p] = now
            if not pending and len(seen) == n and all(len(first_set[s.name]) == n for s in servers):
                break
            asks = [(key, qname, key[1]) for key, (qname, _) in pending.items()]
            for key, rcode, addrs in burst(sock, asks, 0.02):
                if key not in pending:
                    continue
                qname, ip = pending[key]
                if rcode == 0 and ip in addrs:
                    now = time.monotonic()
                    first[key[0]][key[2]] = now
                    del pending[key]
        stop.set()
        self.row("prop", "endpointslice-controller", f"{label}-stale-cache-retries", self.stale_retries(ns) - retries,
                 "its requeues of this namespace's Service for an out-of-date informer (waits with backoff)")
        for s in servers:
            for kind, got in (("hostname", first[s.name]), ("headless-member", first_set[s.name])):
                lat = [(got[p] - seen[p][0]) * 1000 for p in got if p in seen]
                missing = n - len(lat)
                self.row("prop", s.name, f"{label}-{kind}-p50-ms", round(pct(lat, 0.5), 2),
                         f"n={len(lat)} missing={missing} load1={load1()}")
                self.row("prop", s.name, f"{label}-{kind}-p99-ms", round(pct(lat, 0.99), 2), f"n={len(lat)}")
        self.k.try_req("DELETE", f"/api/v1/namespaces/{ns}")

    # --- stage nx
    def nx(self, caches):
        ns = "h2h-nx"
        self.k.namespace(ns)
        self.k.headless(ns, "gang", {"app": "gang"})
        seen, stop = {}, threading.Event()
        threading.Thread(target=self.k.watch_ips, args=(ns, seen, stop), daemon=True).start()
        time.sleep(0.5)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        lat = {c.name: [] for c in caches}
        for i in range(self.a.nx_pods):
            name = f"n-{i}"
            qname = f"{name}.gang.{ns}.svc.cluster.local"
            for c in caches:
                r = ask(sock, c.dns, qname)
                assert r and r[0] == 3, f"{c.name}: {qname} should be NXDOMAIN first, got {r}"
            self.k.pod(ns, name, {"app": "gang"}, name, "gang", self.nodes[i % len(self.nodes)])
            deadline = time.monotonic() + 60
            done = set()
            while time.monotonic() < deadline and len(done) < len(caches):
                for c in caches:
                    if c.name in done or name not in seen:
                        continue
                    r = ask(sock, c.dns, qname, 0.2)
                    if r and r[0] == 0 and seen[name][1] in r[1]:
                        lat[c.name].append((time.monotonic() - seen[name][0]) * 1000)
                        done.add(c.name)
                time.sleep(0.005)
        stop.set()
        for c in caches:
            xs = lat[c.name]
            self.row("nx", c.name, "cached-nxdomain-p50-ms", round(pct(xs, 0.5), 1), f"n={len(xs)} load1={load1()}")
            self.row("nx", c.name, "cached-nxdomain-p99-ms", round(pct(xs, 0.99), 1), f"n={len(xs)}")
        self.k.try_req("DELETE", f"/api/v1/namespaces/{ns}")

    # --- stage gang
    def watch_ranks(self, ns, job, seen, stop):
        """Record, per Job uid, when each completion index is seen with a pod
        IP: seen[uid][index] = (monotonic time, ip). An API server closes a
        watch it finds slow (1.37 did, under load): then list and watch
        again, counting it (seen["rewatch"]); an IP first seen in such a
        list is timed from the list, a little late."""
        sel = urllib.parse.quote(f"job-name={job}")
        base = f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}"

        def record(o):
            if o["metadata"].get("deletionTimestamp"):
                return
            ip = o.get("status", {}).get("podIP")
            idx = o["metadata"].get("labels", {}).get("batch.kubernetes.io/job-completion-index")
            owner = next((r["uid"] for r in o["metadata"].get("ownerReferences", []) if r.get("kind") == "Job"), None)
            if ip and idx is not None and owner:
                ranks = seen.setdefault(owner, {})
                had = ranks.get(int(idx))
                if had is None or had[1] != ip:
                    # A new IP for a rank (kwok may render one anew):
                    # the right answer is the newest, timed from its write.
                    ranks[int(idx)] = (time.monotonic(), ip)
                    if had is not None:
                        seen["changed"] = seen.get("changed", 0) + 1

        first = True
        while not stop.is_set():
            try:
                got = self.k.req("GET", base)
                if not first:
                    seen["rewatch"] = seen.get("rewatch", 0) + 1
                    for o in got["items"]:
                        record(o)
                first = False
                rv = got["metadata"]["resourceVersion"]
                r = urllib.request.Request(self.k.url + base + f"&watch=1&resourceVersion={rv}"
                                           "&allowWatchBookmarks=true&timeoutSeconds=1800")
                with urllib.request.urlopen(r, context=self.k.ctx, timeout=1800) as f:
                    for line in f:
                        if stop.is_set():
                            return
                        ev = json.loads(line)
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            record(ev["object"])
            except Exception as e:  # noqa: BLE001 (bench: watch again)
                print(f"gang watch: {e}; watching again", file=sys.stderr)
                time.sleep(0.2)

    def gang_job(self, ns, job, ranks):
        return self.k.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", {
            "metadata": {"name": job},
            "spec": {"completions": ranks, "parallelism": ranks, "completionMode": "Indexed",
                     "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"app": "gang"}},
                                  "spec": {"subdomain": job, "restartPolicy": "Never",
                                           "containers": [{"name": "trainer", "image": "fake",
                                                           "ports": [{"name": "nccl", "containerPort": 29500}]}]}}}})

    def gang_wait(self, servers, ns, job, uid, seen, t0, label):
        """Ask every rank name of Job `uid` on every server until each
        answers its pod's IP (or the deadline); rows per server."""
        ranks = self.a.gang_ranks
        retries = self.stale_retries(ns)
        names = [f"{job}-{i}.{job}.{ns}.svc.cluster.local" for i in range(ranks)]
        first = {s.name: {} for s in servers}
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setblocking(False)
        deadline = time.monotonic() + self.a.gang_limit
        while time.monotonic() < deadline and any(len(first[s.name]) < ranks for s in servers):
            ips = seen.get(uid, {})
            for s in servers:
                # Ask again a rank whose pod's IP changed since its answer.
                for i in [i for i, (_, ip) in first[s.name].items() if ips.get(i, (0, ip))[1] != ip]:
                    del first[s.name][i]
            # Every unanswered rank is asked each cycle, as a rank's resolver
            # retries at start-up (its IP may not be known yet: an NXDOMAIN
            # now is what a cache in front keeps).
            asks = [((s.name, i), names[i], s.dns) for s in servers
                    for i in [i for i in range(ranks) if i not in first[s.name]][:512]]
            for (name, i), rcode, addrs in burst(sock, asks, 0.05):
                want = ips.get(i)
                if rcode == 0 and want and want[1] in addrs and i not in first[name]:
                    first[name][i] = (time.monotonic(), want[1])
            time.sleep(0.01)
        ips = seen.get(uid, {})
        for s in servers:
            # A rank answered an IP its pod no longer has counts as not yet.
            got = {i: t for i, (t, ip) in first[s.name].items() if ips.get(i, (0, ip))[1] == ip}
            allt = (max(got.values()) - t0) if len(got) == ranks else float("nan")
            lat = [(got[i] - ips[i][0]) * 1000 for i in got if i in ips]
            note = f"ranks={ranks} answered={len(got)} load={load1()}"
            self.row("gang", s.name, f"{label}-all-ranks-s", round(allt, 2), note)
            self.row("gang", s.name, f"{label}-rank-p50-ms", round(pct(lat, 0.5), 1), f"n={len(lat)}")
            self.row("gang", s.name, f"{label}-rank-p99-ms", round(pct(lat, 0.99), 1), f"n={len(lat)}")
        self.row("gang", "endpointslice-controller", f"{label}-stale-cache-retries", self.stale_retries(ns) - retries,
                 "its requeues of the gang's Service for an out-of-date informer (waits with backoff)")
        last_ip = max((t for t, _ in ips.values()), default=t0)
        self.row("gang", "api-server", f"{label}-all-ips-s", round(last_ip - t0, 2),
                 f"ips={len(ips)} ip-changes={seen.get('changed', 0)} rewatches={seen.get('rewatch', 0)}"
                 " (the control plane's own time to give every rank its IP)")

    def gang(self, servers):
        ns, job = "h2h-gang", "llama"
        self.k.namespace(ns)
        self.k.headless(ns, job, {"job-name": job})
        seen, stop = {}, threading.Event()
        threading.Thread(target=self.watch_ranks, args=(ns, job, seen, stop), daemon=True).start()
        time.sleep(0.5)
        for rnd in range(self.a.gang_rounds):
            t0 = time.monotonic()
            uid = self.gang_job(ns, job, self.a.gang_ranks)["metadata"]["uid"]
            self.gang_wait(servers, ns, job, uid, seen, t0, f"r{rnd}-start")
            # The gang restart: the Job deleted with its pods, then made anew.
            t0 = time.monotonic()
            self.k.req("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}",
                       {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground",
                        "gracePeriodSeconds": 0})
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not isinstance(
                    self.k.try_req("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}"), Exception):
                time.sleep(0.2)
            uid = self.gang_job(ns, job, self.a.gang_ranks)["metadata"]["uid"]
            self.gang_wait(servers, ns, job, uid, seen, t0, f"r{rnd}-restart")
            self.k.try_req("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}",
                           {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not isinstance(
                    self.k.try_req("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}"), Exception):
                time.sleep(0.2)
        stop.set()
        self.k.try_req("DELETE", f"/api/v1/namespaces/{ns}")

    # --- stage rss
    def populate(self, ns, count):
        """`count` pods in gangs of 1,000 (a headless Service each) in ns."""
        have = self.count_pods(ns, "") \
            if not isinstance(self.k.try_req("GET", f"/api/v1/namespaces/{ns}"), Exception) else 0
        if have == 0:
            self.k.namespace(ns)
        gangs = (count + 999) // 1000
        for g in range(gangs):
            self.k.try_req("POST", f"/api/v1/namespaces/{ns}/services", {
                "metadata": {"name": f"gang{g}"},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": {"gang": f"g{g}"}, "ports": [{"name": "nccl", "port": 29500}]}})

        local = threading.local()

        def mk(i):
            g = i // 1000
            if not hasattr(local, "conn"):
                local.conn = KeptAlive(self.k)
            for _ in range(5):
                st = local.conn.status("POST", f"/api/v1/namespaces/{ns}/pods", {
                    "metadata": {"name": f"p-{i}", "labels": {"gang": f"g{g}"}},
                    "spec": {"hostname": f"p-{i}", "subdomain": f"gang{g}",
                             "nodeName": self.nodes[i % len(self.nodes)],
                             "containers": [{"name": "w", "image": "fake",
                                             "ports": [{"name": "nccl", "containerPort": 29500}]}]}})
                if st in (201, 409):
                    return
                time.sleep(0.5)

        t0 = time.time()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(mk, range(have, count)))
        # kwok sets the IPs; wait until no pod is without one. The API server
        # filters by status.podIP itself: listing every pod each time was 150
        # MB of JSON per poll at 100k pods, on the API server being measured.
        deadline = time.time() + 3600
        while time.time() < deadline:
            r = self.k.try_req("GET", f"/api/v1/namespaces/{ns}/pods?fieldSelector=status.podIP%3D&limit=1",
                               timeout=300)
            if not isinstance(r, Exception) and not r["items"] and not r["metadata"].get("continue"):
                break
            time.sleep(2)
        n_ip = self.count_pods(ns, "status.podIP!%3D")
        self.row("rss", "cluster", f"pods-{count}-populate-s", round(time.time() - t0, 1), f"pods with IPs: {n_ip}")

    def count_pods(self, ns, field_selector):
        """Pods of ns matching a field selector, counted page by page."""
        n, cont = 0, ""
        while True:
            r = self.k.req("GET", f"/api/v1/namespaces/{ns}/pods?fieldSelector={field_selector}&limit=5000"
                           + (f"&continue={urllib.parse.quote(cont)}" if cont else ""), timeout=300)
            n += len(r["items"])
            cont = r["metadata"].get("continue")
            if not cont:
                return n

    # --- stage qps
    def query_file(self, ns, count):
        """The query mix over `count` pods: 2,000 pods spread over every gang,
        their hostname names, a dashed name for every 4th, NXDOMAIN for every 9th."""
        qf = os.path.join(self.logs, f"queries-{count}.txt")
        items = self.k.req("GET", f"/api/v1/namespaces/{ns}/pods?limit=100000", timeout=300)["items"]
        items = [p for p in items if p.get("status", {}).get("podIP")]
        step = max(1, len(items) // 2000)
        with open(qf, "w") as f:
            for i, p in enumerate(items[::step][:2000]):
                h, sub, ip = p["spec"]["hostname"], p["spec"]["subdomain"], p["status"]["podIP"]
                f.write(f"{h}.{sub}.{ns}.svc.cluster.local A\n")
                if i % 4 == 0:
                    f.write(f"{dashed(ip)}.{sub}.{ns}.svc.cluster.local A\n")
                if i % 9 == 0:
                    f.write(f"missing-{i}.{sub}.{ns}.svc.cluster.local A\n")
        return qf

    def qps(self, s, qf, count, rnd):
        """dnsperf against one server: at --rate (CPU-ms per 1,000 answers),
        then unpaced (max QPS). Returns {metric: value}."""
        got = {}
        for rate in (self.a.rate, None):
            c0 = cpu_s(s.pid)
            argv = ["dnsperf", "-s", "127.0.0.1", "-p", str(s.dns), "-d", qf, "-l", str(self.a.qps_seconds), "-c", "4", "-q", "500"]
            if rate:
                argv += ["-Q", str(rate)]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=self.a.qps_seconds + 60).stdout
            c1 = cpu_s(s.pid)
            done = lost = 0
            q = 0.0
            for line in out.splitlines():
                line = line.strip()
                if line.startswith("Queries completed:"):
                    done = int(line.split()[2])
                elif line.startswith("Queries lost:"):
                    lost = int(line.split()[2])
                elif line.startswith("Queries per second:"):
                    q = float(line.split()[3])
            tag = f"fixed-{rate}" if rate else "max"
            load = load1()
            self.row("qps", s.name, f"{count}-{tag}-qps", round(q), f"round={rnd} lost={lost} load1={load}")
            got[f"{count}-{tag}-qps"] = q
            if done:
                v = (c1 - c0) * 1e6 / done
                self.row("qps", s.name, f"{count}-{tag}-cpu-ms-per-1k", round(v, 2), f"round={rnd} load1={load}")
                got[f"{count}-{tag}-cpu-ms-per-1k"] = v
        return got

    # --- stages rss and qps, in rounds
    def rounds(self, stages):
        """At each size: ROUNDS rounds, each starting podns then every CoreDNS
        build x configuration in turn, one at a time and fresh: RSS, time to
        ready and CPU after the initial sync (rss), then dnsperf (qps). The
        machine is shared: alternating in rounds spreads its noise over every
        server; a summary row per server and metric gives min/median/max."""
        if "qps" in stages and not shutil.which("dnsperf"):
            self.row("qps", "-", "skipped", 0, "dnsperf not installed (apt-get install dnsperf)")
            stages = [x for x in stages if x != "qps"]
        ns = "h2h-rss"
        podns = self.podns_specs()
        specs = podns + self.coredns_specs()
        for count in self.a.sizes:
            self.populate(ns, count)
            last = last_name(ns, count)
            qf = self.query_file(ns, count) if "qps" in stages else None
            got = {name: {} for name, _, _ in specs}
            for rnd in range(1, self.a.rounds + 1):
                for name, path, config in specs:
                    t0 = time.time()
                    s = self.start_spec(name, path, config)
                    ok = wait_answer(s.dns, last, 1800)
                    ready = time.time() - t0
                    time.sleep(2)  # let a just-finished sync settle before sampling RSS
                    if "rss" in stages:
                        v = rss_kib(s.pid) / 1024
                        load = load1()
                        anon, file = (rss_kib(s.pid, f) / 1024 for f in ("RssAnon", "RssFile"))
                        self.row("rss", name, f"rss-{count}-MiB", round(v, 1),
                                 f"round={rnd} synced={ok} ready_s={ready:.1f} cpu_s={cpu_s(s.pid):.2f}"
                                 f" anon_MiB={anon:.1f} file_MiB={file:.1f} load1={load}")
                        got[name].setdefault(f"rss-{count}-MiB", []).append(v)
                        got[name].setdefault(f"ready-{count}-s", []).append(ready)
                    if "qps" in stages:
                        for k, v in self.qps(s, qf, count, rnd).items():
                            got[name].setdefault(k, []).append(v)
                    s.stop()
                    self.procs.remove(s)
            for name, metrics in got.items():
                for metric, xs in metrics.items():
                    self.row("summary", name, f"{metric}-median", round(median(xs), 2),
                             f"n={len(xs)} min={min(xs):.2f} max={max(xs):.2f} spread={spread(xs):.0f}%")
            # The best CoreDNS configuration at this size: highest median max QPS.
            key = f"{count}-max-qps"
            cds = [n for n, _, c in specs if c != "podns" and key in got[n]]
            if cds:
                best = max(cds, key=lambda n: median(got[n][key]))
                p = got[podns[0][0]].get(key)
                ratio = f" podns/best={median(p) / median(got[best][key]):.2f}x" if p else ""
                self.row("summary", best, f"{count}-best-coredns", round(median(got[best][key])), f"by median max QPS{ratio}")

    # --- stage restart
    def restart_apiserver(self):
        """Stop kube-apiserver and start it again with its flags
        (tests/cluster/ctl.sh, which also restarts kube-controller-manager
        and kube-scheduler, as a control-plane upgrade does). Returns when
        its /readyz is 200 and the other two are healthy again; DIR/env
        then holds the new pids."""
        ctl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "cluster", "ctl.sh")
        for step in ("stop-apiserver", "start-apiserver"):
            subprocess.run(["bash", ctl, self.a.cluster, step], check=True, timeout=600)
        self.env = load_env(self.a.cluster)

    def restart(self):
        """Stage restart: at each size, each server (the first podns build,
        then each CoreDNS build in the first of --coredns-configs) started
        fresh and synced, then kube-apiserver restarted under it. Rows: the
        time from the control plane being back (the API server ready,
        kube-controller-manager and kube-scheduler healthy) to the server
        answering a pod created then (its IP is kwok's), the time from that
        pod's IP status write to the answer, and the server's CPU from the
        stop to the answer."""
        ns = "h2h-rss"
        specs = self.podns_specs()[:1] + [(f"coredns-{n}/{self.configs[0]}", p, self.configs[0])
                                          for n, p in self.builds]
        for count in self.a.sizes:
            self.populate(ns, count)
            last = last_name(ns, count)
            for i, (name, path, config) in enumerate(specs):
                s = self.start_spec(name, path, config)
                if not wait_answer(s.dns, last, 1800):
                    self.row("restart", name, f"{count}-not-synced", 1, f"see {self.logs}")
                    s.stop()
                    self.procs.remove(s)
                    continue
                c0 = cpu_s(s.pid)
                t_stop = time.monotonic()
                self.restart_apiserver()
                t_up = time.monotonic()
                seen, stop = {}, threading.Event()
                threading.Thread(target=self.k.watch_ips, args=(ns, seen, stop), daemon=True).start()
                probe = f"restart-{count}-{i}"
                self.k.try_req("DELETE", f"/api/v1/namespaces/{ns}/pods/{probe}?gracePeriodSeconds=0")
                self.k.pod(ns, probe, {"gang": "g0"}, probe, "gang0", self.nodes[i % len(self.nodes)])
                qname = f"{probe}.gang0.{ns}.svc.cluster.local"
                deadline = time.monotonic() + 600
                answered = None
                while time.monotonic() < deadline:
                    if probe in seen and wait_answer(s.dns, qname, 0.2, seen[probe][1]):
                        answered = time.monotonic()
                        break
                    time.sleep(0.01)
                stop.set()
                note = f"apiserver down+up {t_up - t_stop:.1f} s load1={load1()}"
                if answered is None:
                    self.row("restart", name, f"{count}-answered", 0, f"no answer for {qname} in 600 s; {note}")
                else:
                    self.row("restart", name, f"{count}-fresh-answer-s", round(answered - t_up, 2),
                             f"from the control plane back (ctl.sh done) to a new pod's answer; {note}")
                    self.row("restart", name, f"{count}-probe-ip-to-answer-ms",
                             round((answered - seen[probe][0]) * 1000, 1), "from its IP status write")
                self.row("restart", name, f"{count}-cpu-s", round(cpu_s(s.pid) - c0, 2),
                         "the server's CPU from the stop to the answer")
                s.stop()
                self.procs.remove(s)
                self.k.try_req("DELETE", f"/api/v1/namespaces/{ns}/pods/{probe}?gracePeriodSeconds=0")

    # --- stage api
    def pod_and_slice_writes(self):
        m = self.k.metrics()
        return sum(v for k, v in m.items() if k.startswith("apiserver_request_total{")
                   and ('resource="pods"' in k or 'resource="endpointslices"' in k)
                   and any(f'verb="{v}"' in k for v in ("POST", "PUT", "PATCH", "DELETE", "APPLY")))

    def settle(self, limit=300):
        """Wait until nothing writes pods or EndpointSlices for 5 s: after a
        populate kwok's status writes and the EndpointSlice controller go on
        for minutes, and a case measured meanwhile counts their events.
        Returns the seconds waited (the limit when it never settled)."""
        t0, prev = time.time(), None
        while time.time() - t0 < limit:
            w = self.pod_and_slice_writes()
            if w == prev:
                return time.time() - t0
            prev = w
            time.sleep(5)
        return limit

    def api(self):
        def changes(label, server_factory):
            settled = self.settle()
            self.row("api", label, "settle-s", round(settled, 1), "nothing wrote pods or slices for 5 s before the case")
            s = server_factory() if server_factory else None
            time.sleep(2)
            m0 = self.k.metrics()
            stop = threading.Event()
            t = threading.Thread(target=self.churn, args=(self.a.churn, stop, f"h2h-api-{label}"), daemon=True)
            t.start()
            time.sleep(self.a.api_seconds)
            stop.set()
            t.join(30)
            time.sleep(3)
            m1 = self.k.metrics()
            if s:
                s.stop()
                self.procs.remove(s)

            def delta(pred):
                return sum(v - m0.get(k, 0) for k, v in m1.items() if pred(k))

            pod_writes = delta(lambda k: k.startswith("apiserver_request_total{") and 'resource="pods"' in k
                               and any(f'verb="{v}"' in k for v in ("POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "APPLY"))
                               and 'subresource=""' in k)
            status_writes = delta(lambda k: k.startswith("apiserver_request_total{") and 'resource="pods"' in k
                                  and 'subresource="status"' in k and any(f'verb="{v}"' in k for v in ("PUT", "PATCH")))
            slice_writes = delta(lambda k: k.startswith("apiserver_request_total{") and 'resource="endpointslices"' in k
                                 and any(f'verb="{v}"' in k for v in ("POST", "PUT", "PATCH", "DELETE")))
            sizes = {}
            for res in ("pods", "endpointslices", "services", "jobs"):
                sizes[res] = delta(lambda k: k.startswith("apiserver_watch_events_sizes_sum{") and f'resource="{res}"' in k)
            return pod_writes, status_writes, slice_writes, sizes

        base = changes("none", None)
        runs = {"none": base}
        runs["podns-json"] = changes("podns-json", lambda: self.start_podns("podns-json", "json"))
        runs["podns-protobuf"] = changes("podns-protobuf", lambda: self.start_podns("podns-pb", "protobuf"))
        runs["coredns"] = changes("coredns", lambda: self.start_coredns())
        for label, (pw, sw, ew, sizes) in runs.items():
            self.row("api", label, "pod-writes", int(pw), "create/delete")
            self.row("api", label, "pod-status-writes", int(sw), "kwok")
            self.row("api", label, "endpointslice-writes", int(ew), "EndpointSlice controller")
            for res, b in sizes.items():
                extra = b - base[3][res]
                self.row("api", label, f"watch-bytes-{res}", int(b), f"over no DNS server: {int(extra)}")
            if label != "none":
                per = (sum(sizes.values()) - sum(base[3].values())) / max(1, pw)
                self.row("api", label, "watch-bytes-per-pod-write", round(per), "all watched resources, over no DNS server")

    # --- churn: the prop, api and bill stages' background pod changes
    def churn(self, rate, stop, ns="h2h-churn", count=None):
        """Pod creates and deletes in `ns` (made anew, a headless Service
        over its pods) at `rate` in all, 50 pods live: after the first 50
        creates a delete and a create alternate, on one kept-alive
        connection. A slot missed (the API server or this harness behind)
        is skipped, not made up later: a burst to catch up ran the last
        window of a 2026-12-07 bill at 49/s instead of 20/s. count[0], when
        given, counts the mutations the API server accepted."""
        self.k.namespace(ns)
        self.k.headless(ns, "churn", {"app": "churn"})
        conn = KeptAlive(self.k)

        def req(method, path, body=None):
            return (conn.status(method, path, body) or 999) < 300

        live = []
        i = 0
        gap = 1.0 / rate
        nxt = time.monotonic()
        deadline = time.monotonic() + 24 * 3600
        while not stop.is_set() and time.monotonic() < deadline:
            if len(live) >= 50:
                ok = req("DELETE", f"/api/v1/namespaces/{ns}/pods/{live.pop(0)}?gracePeriodSeconds=0")
            else:
                name = f"c-{i}"
                i += 1
                ok = req("POST", f"/api/v1/namespaces/{ns}/pods", {
                    "metadata": {"name": name, "labels": {"app": "churn"}},
                    "spec": {"nodeName": self.nodes[i % len(self.nodes)],
                             "containers": [{"name": "c", "image": "fake"}]}})
                if ok:
                    live.append(name)
            if ok and count is not None:
                count[0] += 1
            nxt = max(nxt + gap, time.monotonic())
            time.sleep(max(0, nxt - time.monotonic()))

    # --- stage bill: kube-apiserver's own cost per watcher kind and count
    def apiserver_conns(self, port):
        """The API server's established connections on `port`: {client port:
        (bytes_acked on the API server's side, client pid)} from `ss -tinp`."""
        out = subprocess.run(["ss", "-tinpH", "state", "established",
                              f"( sport = :{port} or dport = :{port} )"],
                             capture_output=True, text=True, timeout=60).stdout
        acked, owner, cur = {}, {}, None
        for line in out.splitlines():
            if line[:1] in ("\t", " "):
                if cur is not None:
                    m = re.search(r"bytes_acked:(\d+)", line)
                    acked[cur] = int(m.group(1)) if m else 0
                cur = None
                continue
            f = line.split()
            if len(f) < 4:
                continue
            lport, pport = int(f[2].rsplit(":", 1)[1]), int(f[3].rsplit(":", 1)[1])
            m = re.search(r"pid=(\d+)", line)
            cur = None
            if lport == port:
                cur = pport
            elif pport == port and m:
                owner[lport] = int(m.group(1))
        return {p: (b, owner.get(p)) for p, b in acked.items()}

    def start_watchers(self, kind, n, relays=None):
        """n watchers of `kind`, started in batches of 10, each waited for
        (podns: /readyz 200; CoreDNS: it answers the API server's Service).
        Stops starting, and says so, when the machine's free memory falls
        under 4 GiB (the machine is shared)."""
        procs = []
        for b in range(0, n, 10):
            avail = int(next(l for l in open("/proc/meminfo") if l.startswith("MemAvailable")).split()[1])
            if avail < 4 * 1024 * 1024:
                self.row("bill", f"{kind}-{n}", "started", len(procs), f"stopped: MemAvailable {avail // 1024} MiB")
                break
            batch = []
            for i in range(b, min(n, b + 10)):
                name = f"bill-{kind}-{i}"
                if kind == "podns-direct":
                    p = self.podns_proc(name, [f"--kubeconfig={self.kubeconfig}"])
                elif kind == "relays":
                    r = relays[i % len(relays)]
                    p = self.podns_proc(name, [f"--relay-kubeconfig={r.kubeconfig}",
                                               f"--node={self.nodes[i % len(self.nodes)]}",
                                               f"--relay-dns=127.0.0.1:{r.dns}"])
                else:
                    p = self.bill_coredns(name)
                batch.append(p)
            deadline = time.time() + 300
            for p in batch:
                while time.time() < deadline and p.p.poll() is None and not self.is_ready(p):
                    time.sleep(0.2)
                if not self.is_ready(p):
                    self.row("bill", f"{kind}-{n}", "not-ready", p.name, f"see {self.logs}/{p.name}.log")
            procs += batch
        return procs

    def podns_proc(self, name, flags):
        dns, admin = free_port(), free_port()
        p = Proc(name, [self.a.podns, "serve", f"--dns-listen=127.0.0.1:{dns}",
                        f"--admin-listen=127.0.0.1:{admin}", "--udp-sockets=1", *flags],
                 self.logs, {"RUST_LOG": "warn", "NO_COLOR": "1"})
        p.name, p.dns, p.admin = name, dns, admin
        return p

    def bill_coredns(self, name):
        """CoreDNS with its kubernetes plugin as a cluster runs it (`pods
        disabled`, the default): its API requests are the plugin's."""
        port = free_port()
        cf = os.path.join(self.logs, f"{name}.Corefile")
        with open(cf, "w") as f:
            f.write(f""".:{port} {{
    bind 127.0.0.1
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods disabled
        endpoint_pod_names
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
""")
        p = Proc(name, [self.coredns, "-conf", cf], self.logs)
        p.name, p.dns, p.admin = name, port, None
        return p

    def is_ready(self, p):
        if p.p.poll() is not None:
            return False
        if p.admin is None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                r = ask(s, p.dns, "kubernetes.default.svc.cluster.local", 0.3)
            finally:
                s.close()
            return bool(r and r[0] == 0 and r[1])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p.admin}/readyz", timeout=2) as f:
                return f.status == 200
        except Exception:  # noqa: BLE001
            return False

    def start_relays(self, count):
        """`count` podns relays over the API server, each writing a
        kubeconfig for node instances (ServiceAccount podns-bill/podns-node,
        granted the relay's one permission as deploy/'s RBAC does)."""
        ns = "podns-bill"
        if isinstance(self.k.try_req("GET", f"/api/v1/namespaces/{ns}"), Exception):
            self.k.req("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        self.k.try_req("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "podns-node"}})
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        self.k.try_req("POST", f"{rbac}/clusterroles", {
            "metadata": {"name": "podns-relay-reader"},
            "rules": [{"apiGroups": ["dns.podns.io"], "resources": ["relays"], "verbs": ["get"]}]})
        self.k.try_req("POST", f"{rbac}/clusterrolebindings", {
            "metadata": {"name": "podns-relay-reader-bill"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "podns-relay-reader"},
            "subjects": [{"kind": "ServiceAccount", "namespace": ns, "name": "podns-node"}]})
        relays = []
        for i in range(count):
            rk = os.path.join(self.logs, f"relay-{i}.yaml")
            if os.path.exists(rk):
                os.remove(rk)
            p = self.podns_proc(f"bill-relay-{i}", [
                f"--kubeconfig={self.kubeconfig}", f"--relay-listen=127.0.0.1:{free_port()}",
                f"--relay-kubeconfig-out={rk}", f"--relay-kubeconfig-account={ns}/podns-node"])
            p.kubeconfig = rk
            deadline = time.time() + 120
            while time.time() < deadline and not (self.is_ready(p) and os.path.exists(rk)):
                time.sleep(0.2)
            assert os.path.exists(rk), f"relay {i} wrote no kubeconfig; see {self.logs}/{p.name}.log"
            relays.append(p)
        return relays

    def bill_case(self, kind, n, port, apiserver, churn_count, label=None):
        """One case: start the watchers, let them settle, then measure the
        API server over --bill-seconds of the running churn."""
        label = label or f"{kind}-{n}"
        # The start too: every watcher's first lists, until it is ready.
        s_c0, s_t0, s_s0 = cpu_s(apiserver), time.monotonic(), self.apiserver_conns(port)
        relays = self.start_relays(2) if kind == "relays" else []
        watchers = self.start_watchers(kind, n, relays) if n else []
        procs = relays + watchers
        s_c1, s_t1, s_s1 = cpu_s(apiserver), time.monotonic(), self.apiserver_conns(port)
        mine = {p.pid for p in procs}
        s_bytes = sum(b - s_s0.get(c, (0, None))[0] for c, (b, pid) in s_s1.items() if pid in mine)
        self.row("bill", label, "start-s", round(s_t1 - s_t0, 2), "from the first start to the last watcher ready")
        self.row("bill", label, "start-cpu-s", round(s_c1 - s_c0, 2), "the API server's, churn included")
        self.row("bill", label, "start-socket-bytes", s_bytes, "to the watchers' connections until all were ready")
        time.sleep(self.a.bill_settle)
        # Which processes' connections count as the watchers': the processes
        # that hold the API server's watches (the relays, not the node
        # instances, which must hold none).
        upstream = {p.pid for p in (relays or watchers)}
        nodes_pids = {p.pid for p in watchers} if relays else set()
        rss = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                rss.append(rss_kib(apiserver))
                stop.wait(1)

        m0, c0, s0, n0, w0 = self.k.metrics(), cpu_s(apiserver), self.apiserver_conns(port), churn_count[0], \
            sum(cpu_s(p.pid) for p in procs if p.p.poll() is None)
        t0 = time.monotonic()
        th = threading.Thread(target=sample, daemon=True)
        th.start()
        time.sleep(self.a.bill_seconds)
        c1, s1, n1, w1 = cpu_s(apiserver), self.apiserver_conns(port), churn_count[0], \
            sum(cpu_s(p.pid) for p in procs if p.p.poll() is None)
        secs = time.monotonic() - t0
        m1 = self.k.metrics()
        stop.set()
        th.join(5)
        rss.append(rss_kib(apiserver))
        alive = sum(1 for p in watchers if p.p.poll() is None)
        watcher_rss = sum(rss_kib(p.pid) for p in procs if p.p.poll() is None) / 1024

        def delta(prefix, pred=lambda k: True):
            return sum(v - m0.get(k, 0) for k, v in m1.items() if k.startswith(prefix) and pred(k))

        ev_bytes = delta("apiserver_watch_events_sizes_sum{")
        ev_count = delta("apiserver_watch_events_total{")
        pod_bytes = delta("apiserver_watch_events_sizes_sum{", lambda k: 'resource="pods"' in k)
        pod_writes = delta("apiserver_request_total{", lambda k: 'resource="pods"' in k and any(
            f'verb="{v}"' in k for v in ("POST", "PUT", "PATCH", "DELETE")))
        requests = delta("apiserver_request_total{", lambda k: 'verb="WATCH"' not in k)
        sock_all = sock_w = closed = 0
        node_conns = 0
        for cport, (b, pid) in s1.items():
            d = b - s0.get(cport, (0, None))[0]
            sock_all += d
            if pid in upstream:
                sock_w += d
            if pid in nodes_pids:
                node_conns += 1
        closed = sum(1 for cport in s0 if cport not in s1)
        load = load1()
        note = f"window_s={secs:.0f} load1={load}"
        got = {"start-s": s_t1 - s_t0, "start-cpu-s": s_c1 - s_c0, "start-socket-bytes": s_bytes,
               "cpu-s": c1 - c0, "mutations": n1 - n0, "pod-writes": pod_writes, "requests": requests,
               "watch-event-bytes": ev_bytes, "watch-events": ev_count, "watch-pod-bytes": pod_bytes,
               "socket-bytes-all": sock_all, "socket-bytes-watchers": sock_w,
               "rss-max-MiB": max(rss) / 1024, "rss-end-MiB": rss[-1] / 1024}
        for k, v in got.items():
            if k.startswith("start"):
                continue
            self.row("bill", label, k, round(v, 2) if k.startswith(("cpu", "rss")) else int(v), note)
        # Bytes per watched resource (all watchers of the API server: over
        # the none case, what this case's watchers added).
        for k in sorted(m1):
            if k.startswith("apiserver_watch_events_sizes_sum{"):
                d = m1[k] - m0.get(k, 0)
                res_name = re.search(r'resource="([^"]*)"', k)
                if d > 0 and res_name:
                    got[f"watch-bytes-{res_name.group(1)}"] = d
                    self.row("bill", label, f"watch-bytes-{res_name.group(1)}", int(d), note)
        self.row("bill", label, "watchers-alive", alive, f"of {n}; relays={len(relays)} conns_closed_in_window={closed}")
        if relays:
            self.row("bill", label, "node-instance-apiserver-conns", node_conns, "must be 0: node instances read the relays")
        self.row("bill", label, "watchers-cpu-s", round(w1 - w0, 2), "the watcher processes' own CPU (relays included)")
        self.row("bill", label, "watchers-rss-MiB", round(watcher_rss, 1), "sum, end of window (relays included)")
        for p in procs:
            if p.p.poll() is None:
                p.p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.p.wait(20)
            except subprocess.TimeoutExpired:
                p.p.kill()
                p.p.wait()
        return got

    def bill(self):
        """Stage bill: kube-apiserver's CPU, RSS and bytes sent to watchers
        while one churn runs, with no DNS watcher, N podns watching the API
        server, N CoreDNS, and 2 relays with N node instances behind them."""
        apiserver = int(self.env["APISERVER_PID"])
        port = int(urllib.parse.urlparse(self.env["APISERVER_URL"]).port)
        count, stop = [0], threading.Event()
        t = threading.Thread(target=self.churn, args=(self.a.bill_rate, stop, "h2h-bill", count), daemon=True)
        t.start()
        time.sleep(5)  # the first 50 creates: then a delete and a create alternate
        kinds = [k for k in self.a.bill_kinds.split(",") if k]
        res, pairs = {}, {}
        try:
            res["none"] = self.bill_case("none", 0, port, apiserver, count)
            for n in self.a.bill_n:
                for kind in kinds:
                    if self.a.bill_paired:
                        pairs[(kind, n)] = self.bill_case("none", 0, port, apiserver, count, f"none-before-{kind}-{n}")
                    res[(kind, n)] = self.bill_case(kind, n, port, apiserver, count)
            res["none-end"] = self.bill_case("none", 0, port, apiserver, count)
        finally:
            stop.set()
            t.join(30)
        # The baseline: the mean of the none windows before and after; their
        # difference is the drift (the machine is shared) to judge the rest by.
        base = {k: (res["none"][k] + res["none-end"].get(k, 0)) / 2 for k in res["none"]}
        for k in ("cpu-s", "watch-event-bytes", "rss-max-MiB"):
            self.row("bill-sum", "none", f"{k}-drift", round(res["none-end"][k] - res["none"][k], 2),
                     f"first={res['none'][k]:.2f} last={res['none-end'][k]:.2f}")
        table = ["| watchers | N | mutations | API server CPU s (its none) | CPU ms over none | CPU µs per watcher per mutation"
                 " | watch bytes over none | watch B per watcher per mutation | socket bytes to watchers"
                 " | socket B per watcher per mutation | API server RSS max MiB"
                 " | start: s | start: CPU s over none | start: socket B per watcher |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                 f"| none (first, last) | 0 | {res['none']['mutations']}, {res['none-end']['mutations']}"
                 f" | {res['none']['cpu-s']:.2f}, {res['none-end']['cpu-s']:.2f} | | |"
                 f" {res['none']['watch-event-bytes']:,.0f}, {res['none-end']['watch-event-bytes']:,.0f} (all) | | 0 | |"
                 f" {res['none']['rss-max-MiB']:.0f}, {res['none-end']['rss-max-MiB']:.0f} | | | |"]
        for (kind, n), got in ((k, v) for k, v in res.items() if isinstance(k, tuple)):
            # With --bill-paired, the none window just before this case.
            b = pairs.get((kind, n), base)
            muts = max(1, got["mutations"])
            cpu = (got["cpu-s"] - b["cpu-s"]) * 1000
            wb = got["watch-event-bytes"] - b["watch-event-bytes"]
            sb = got["socket-bytes-watchers"]
            for unit, extra, note in (("cpu-ms", cpu, f"none={b['cpu-s'] * 1000:.0f}"),
                                      ("watch-bytes", wb, f"none={b['watch-event-bytes']:.0f}"),
                                      ("socket-bytes", sb, "the watchers' own connections (relays' for relays)")):
                self.row("bill-sum", f"{kind}-{n}", f"{unit}-over-none", round(extra, 1), note)
                self.row("bill-sum", f"{kind}-{n}", f"{unit}-per-watcher", round(extra / n, 2), "")
                self.row("bill-sum", f"{kind}-{n}", f"{unit}-per-mutation", round(extra / muts, 2), f"mutations={int(muts)}")
                self.row("bill-sum", f"{kind}-{n}", f"{unit}-per-watcher-per-mutation", round(extra / n / muts, 4), "")
            self.row("bill-sum", f"{kind}-{n}", "rss-max-MiB-over-none", round(got["rss-max-MiB"] - b["rss-max-MiB"], 1), "")
            # The start, over what the churn alone costs in as long.
            start_cpu = got["start-cpu-s"] - b["cpu-s"] / self.a.bill_seconds * got["start-s"]
            self.row("bill-sum", f"{kind}-{n}", "start-cpu-s-over-none", round(start_cpu, 2),
                     f"start_s={got['start-s']:.1f}: the watchers' first lists")
            self.row("bill-sum", f"{kind}-{n}", "start-socket-bytes-per-watcher", round(got["start-socket-bytes"] / n), "")
            table.append(f"| {kind} | {n} | {muts} | {got['cpu-s']:.2f} ({b['cpu-s']:.2f}) | {cpu:,.0f} | {cpu * 1000 / n / muts:.1f}"
                         f" | {wb:,.0f} | {wb / n / muts:,.0f} | {sb:,.0f} | {sb / n / muts:,.0f} | {got['rss-max-MiB']:.0f}"
                         f" | {got['start-s']:.0f} | {start_cpu:.1f} | {got['start-socket-bytes'] / n:,.0f} |")
        # Where the watch bytes went: per resource, over none, per watcher per mutation.
        kinds_res = sorted({k[len("watch-bytes-"):] for v in res.values() for k in v if k.startswith("watch-bytes-")})
        rows = []
        for (kind, n), got in ((k, v) for k, v in res.items() if isinstance(k, tuple)):
            # With --bill-paired, the none window just before this case.
            b = pairs.get((kind, n), base)
            muts = max(1, got["mutations"])
            cells = []
            for r in kinds_res:
                extra = got.get(f"watch-bytes-{r}", 0) - b.get(f"watch-bytes-{r}", 0)
                cells.append(extra / n / muts)
            rows.append((kind, n, cells))
        # The resources where some case differs from none by 10 B or more.
        shown = [i for i, r in enumerate(kinds_res) if any(abs(c[2][i]) >= 10 for c in rows)]
        for kind, n, cells in rows:
            for i in shown:
                self.row("bill-sum", f"{kind}-{n}", f"watch-bytes-{kinds_res[i]}-per-watcher-per-mutation",
                         round(cells[i], 1), "over none")
        table += ["", "Watch bytes over none per watcher per mutation, by resource:", "",
                  "| watchers | N | " + " | ".join(kinds_res[i] for i in shown) + " |",
                  "|---|---:|" + "---:|" * len(shown)]
        for kind, n, cells in rows:
            table.append(f"| {kind} | {n} | " + " | ".join(f"{cells[i]:,.0f}" for i in shown) + " |")
        print("\n".join(table), flush=True)
        with open(self.a.out + ".md", "w") as f:
            f.write("\n".join(table) + "\n")

    def run(self):
        stages = self.a.stages.split(",")
        try:
            if "prop" in stages or "nx" in stages:
                podns = self.start_podns()
                cd = self.start_coredns("coredns")
                cdv = self.start_coredns("coredns-pods-verified", pods="verified")
                servers = [podns, cd, cdv]
                if "prop" in stages:
                    self.prop(servers, "quiet")
                    stop = threading.Event()
                    t = threading.Thread(target=self.churn, args=(self.a.churn, stop), daemon=True)
                    t.start()
                    time.sleep(3)
                    self.prop(servers, "churn")
                    stop.set()
                    t.join(30)
                if "nx" in stages:
                    caches = [self.start_cache("cache>podns", podns.dns), self.start_cache("cache>coredns", cd.dns)]
                    self.nx(caches)
                self.stop_all()
            if "gang" in stages:
                podns = self.start_podns()
                name, path = self.builds[-1]
                cd = self.start_coredns(f"coredns-{name}/cache", binary=path, config="cache")
                front = self.start_cache("cache>podns", podns.dns)
                self.gang([podns, front, cd])
                self.stop_all()
            if "rss" in stages or "qps" in stages:
                self.rounds([x for x in stages if x in ("rss", "qps")])
            if "restart" in stages:
                self.restart()
            if "api" in stages:
                self.api()
            if "bill" in stages:
                self.bill()
        finally:
            self.stop_all()
            load = open("/proc/loadavg").read().split()[:3]
            self.row("meta", "machine", "loadavg", " ".join(load), f"nproc={os.cpu_count()}")
            self.csv.close()
            print(f"wrote {self.a.out}.csv; logs in {self.logs}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", required=True, help="the DIR of tests/cluster/up.sh")
    ap.add_argument("--podns", required=True, help="the podns binary (release build)")
    ap.add_argument("--podns-build", action="append", default=[], metavar="NAME=PATH",
                    help="a podns build for the rss and qps rounds (repeat, e.g. to compare build profiles); default --podns")
    ap.add_argument("--out", required=True, help="output path without .csv")
    ap.add_argument("--stages", default="prop,nx,qps,rss,api", help="any of prop,nx,gang,qps,rss,restart,api,bill")
    ap.add_argument("--gang-ranks", type=int, default=1024, help="ranks of the gang stage's Indexed Job")
    ap.add_argument("--gang-rounds", type=int, default=2, help="start + restart rounds of the gang stage")
    ap.add_argument("--gang-limit", type=int, default=600, help="seconds to wait for every rank, per start or restart")
    ap.add_argument("--pods", type=int, default=200, help="pods per propagation run")
    ap.add_argument("--create-rate", type=float, default=20.0, help="pod creates/s in a propagation run")
    ap.add_argument("--churn", type=float, default=10.0, help="pod creates+deletes/s of background churn")
    ap.add_argument("--nx-pods", type=int, default=30)
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--rate", type=int, default=20000, help="dnsperf fixed rate (queries/s)")
    ap.add_argument("--qps-seconds", type=int, default=15)
    ap.add_argument("--api-seconds", type=int, default=30)
    ap.add_argument("--coredns", action="append", default=[], metavar="NAME=PATH",
                    help="a CoreDNS build to compare (repeat); default the cluster's (COREDNS in DIR/env)")
    ap.add_argument("--coredns-configs", default="cache,cache+multisocket",
                    help="CoreDNS configurations, each of plain|cache|multisocket joined by +")
    ap.add_argument("--multisocket", type=int, default=os.cpu_count(), help="multisocket's socket count (default: cores)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the rss/qps stages, servers alternating")
    ap.add_argument("--bill-n", default="50,200", help="watcher counts of the bill stage")
    ap.add_argument("--bill-kinds", default="podns-direct,coredns,relays", help="watcher kinds of the bill stage")
    ap.add_argument("--bill-seconds", type=int, default=300, help="the bill stage's window per case")
    ap.add_argument("--bill-settle", type=int, default=15, help="seconds after the watchers are ready before a window")
    ap.add_argument("--bill-paired", action="store_true",
                    help="a none window before each case, subtracted from it (a shared machine drifts)")
    ap.add_argument("--bill-rate", type=float, default=20.0, help="pod mutations/s (creates+deletes) in the bill stage")
    a = ap.parse_args()
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.bill_n = [int(x) for x in a.bill_n.split(",") if x]
    Bench(a).run()


if __name__ == "__main__":
    main()
