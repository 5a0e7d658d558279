"""Chaos on a seeded schedule, every answer judged against an oracle.

    C=$(mktemp -d); tests/cluster/up.sh $C          # or a cluster already up
    tests/cluster/build.sh --k8s v1.34.4 oracle     # the oracle (up.sh does not build it)
    cargo build --release --locked --bin podns
    python3 benches/harness/chaos.py run --cluster $C --podns target/release/podns \
        --schedule short --seed 1 --out /tmp/chaos-short
    python3 benches/harness/chaos.py classify /tmp/chaos-short   # judge a run again
    python3 benches/harness/chaos.py selftest                    # the judge on a hand-written history

--schedule short (about 5 min, what .ci/run runs) or long (--duration,
default 1800 s: the bench). The exit status is 1 when an answer was wrong
(or the run could not be judged), 0 otherwise.

What runs, all on 127.0.0.1 (pod IPs are data, never a destination):
  oracle    tests/cluster/oracle (client-go, no podns code) watches Pods,
            Services and Jobs of the run's namespace and writes truth.jsonl:
            per name, the addresses it should answer and since when (the
            time the change reached the oracle). Its names: a rank's
            hostname name <host>.<gang>.<ns>.svc.cluster.local (the
            addresses of every published pod with that hostname and
            subdomain) and the gang's headless set <gang>.<ns>.svc.cluster.local
            (every published pod it selects). Published: an IP, not
            Succeeded or Failed, no deletionTimestamp (docs/records.md).
  servers   podns-a and podns-b (`podns serve --kubeconfig`, the forward
            target on the host), and CoreDNS (the cluster's pin, `cache 30`,
            forwarding cluster.local to both ports, with no readiness gate
            in between as a Service's endpoints would be), paths podns-a,
            podns-b, coredns. podns-b is the one restarted by the faults.
  baseline  coredns-k8s: CoreDNS alone as clusters run it (its `kubernetes`
            plugin watching the same API server, answering from
            EndpointSlices, `cache 30`), asked the same names on the same
            schedule and judged the same way, for comparison: its wrong
            answers are reported, never counted in the exit status
            (--no-baseline leaves it out).
  prober    one UDP socket per path, --rate questions/s in all (A), over
            every rank and set name of the gangs alive or deleted less than
            30 s ago and a few names that never exist; every answer (or its
            absence after 2 s) goes to answers.jsonl with its time.
  workload  seeded: gangs (Indexed Jobs of 2–8 ranks through the real Job
            controller, kwok's nodes, a headless Service each) created,
            restarted (the Job deleted and made anew under its name, as
            JobSet does, or some of its pods deleted) and deleted, one
            action every 1–3 s (about 5–15 pod mutations/s); actions.jsonl.
  faults    seeded order and parameters, one at a time (faults.jsonl):
              apiserver-restart   tests/cluster/ctl.sh stop-apiserver, start-apiserver
                                  (which restarts kube-controller-manager and
                                  kube-scheduler too)
              apiserver-sigstop   SIGSTOP kube-apiserver for 5–15 s (long: 5–30 s), SIGCONT
              etcd-compact        tests/cluster/ctl.sh compact
              kcm-restart         kube-controller-manager SIGTERM, started again with its argv
              podns-start-around-apiserver-restart
                                  podns-b stopped, kube-apiserver stopped, and podns-b
                                  started OFFSET s from kube-apiserver's start
                                  (short: -3..5 s, long: -3..10 s)

How an answer is judged (classify), at its receive time t, per path:
  right     it matches the oracle's truth at t: NOERROR with a non-empty
            part of the name's addresses (podns answers one pod of a
            restart overlap), the whole set for a set name, or NXDOMAIN /
            no address when the name has none.
  stale     it matches a truth that held within the bound before t
            (--bound, 2 s; the CoreDNS path adds --cache-allowance, 5 s:
            `cache` keeps podns's answers for their TTL, 5 s, and a denial
            for its 5 s floor). Staleness: t minus the end of the newest
            truth it matches.
  early     it matches a truth the oracle recorded at most the bound after
            t (podns saw the change first); lead = how much earlier. (The
            oracle retries every 200 ms, never with a reflector's backoff,
            so it is not the one behind after a fault; a match further
            ahead is counted wrong, and wrong.jsonl says how far ahead.)
  unavailable  SERVFAIL while the API server was down within the bound, or
            within --start-grace (30 s) of the answering podns's start (for
            coredns, of either upstream's).
  no-answer no answer within 2 s.
  wrong     anything else: NXDOMAIN (or no address) for a name published
            for longer than the bound (wrong-nxdomain), an address the name
            had only longer ago than the bound (wrong-stale) or never had
            (wrong-never), SERVFAIL otherwise (wrong-servfail).
An answer counts under the fault whose window holds t (injection to heal
+ --settle, 15 s), else under "none".
"""
import argparse
import json
import os
import random
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnsq import parse, query  # noqa: E402
from kube import Kube as KubeBase, load_env  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CTL = os.path.join(REPO, "tests", "cluster", "ctl.sh")
ZONE = "cluster.local"
FAULTS = ["apiserver-restart", "apiserver-sigstop", "etcd-compact", "kcm-restart",
          "podns-start-around-apiserver-restart"]
CLASSES = ["right", "stale", "early", "unavailable", "no-answer",
           "wrong-nxdomain", "wrong-stale", "wrong-never", "wrong-servfail"]


def log(msg):
    print(f"chaos {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


class Jsonl:
    """Append-only JSON lines, shared by threads."""

    def __init__(self, path):
        self.f = open(path, "w")
        self.lock = threading.Lock()

    def write(self, **rec):
        rec.setdefault("t", time.time())
        with self.lock:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()

    def close(self):
        self.f.close()


class Kube(KubeBase):
    """The API server as cluster admin; requests time out in 10 s, so a
    stopped API server blocks nobody."""

    TIMEOUT = 10

    def ready(self):
        r = self.try_req("GET", "/readyz", timeout=2)
        return not isinstance(r, Exception)


def free_port():
    """A loopback port free for both TCP and UDP."""
    for _ in range(1000):
        t, u = socket.socket(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind(("127.0.0.1", 0))
            p = t.getsockname()[1]
            u.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            t.close()
            u.close()
    raise RuntimeError("no free loopback port")


def wait_until(what, limit, fn, every=0.1):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {limit} s")


class Proc:
    def __init__(self, name, argv, logpath, env=None):
        self.name, self.argv, self.logpath, self.env = name, argv, logpath, env
        self.p = None

    def start(self):
        logf = open(self.logpath, "a")
        self.p = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env={**os.environ, **(self.env or {})}, start_new_session=True)
        logf.close()
        return self

    def stop(self):
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Podns(Proc):
    """`podns serve --kubeconfig` on fixed loopback ports (a restart keeps
    them, so CoreDNS forwards to it again)."""

    def __init__(self, name, binary, kubeconfig, out, events):
        self.dns, self.admin = free_port(), free_port()
        self.events = events
        super().__init__(name, [binary, "serve", f"--kubeconfig={kubeconfig}",
                                f"--dns-listen=127.0.0.1:{self.dns}", f"--admin-listen=127.0.0.1:{self.admin}",
                                "--udp-sockets=1"],
                         os.path.join(out, f"{name}.log"), {"RUST_LOG": "info", "NO_COLOR": "1"})

    def start(self):
        super().start()
        self.events.write(server=self.name, event="start", pid=self.p.pid)
        threading.Thread(target=self._ready, args=(self.p,), daemon=True).start()
        return self

    def stop(self):
        super().stop()
        self.events.write(server=self.name, event="stop")

    def _ready(self, p):
        """Record when this process first answers /readyz 200 (or that it
        never did within 300 s)."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=1) as f:
                    if f.status == 200:
                        self.events.write(server=self.name, event="ready", pid=p.pid)
                        return
            except Exception:  # noqa: BLE001 (not up yet)
                pass
            time.sleep(0.1)
        self.events.write(server=self.name, event="never-ready", pid=p.pid)


def is_ready(admin):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as f:
            return f.status == 200
    except Exception:  # noqa: BLE001
        return False


# --- the prober
class Prober(threading.Thread):
    """Asks every name of `names()` on every path without pause, at `rate`
    questions/s in all, and logs each answer (answers.jsonl)."""

    def __init__(self, paths, names, rate, out, stop):
        super().__init__(daemon=True)
        self.paths, self.names, self.rate, self.stop_ev = paths, names, rate, stop
        self.out = open(out, "w")
        self.sent = 0

    def run(self):
        socks = {}
        for path, port in self.paths.items():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            s.setblocking(False)
            socks[s] = (path, port)
        pending = {s: {} for s in socks}
        cycle, interval = [], 1.0 / self.rate
        next_send, next_expire = time.monotonic(), time.monotonic()
        while not self.stop_ev.is_set():
            now = time.monotonic()
            if now - next_send > 0.5:  # fell behind (a loaded machine): do not burst
                next_send = now
            while now >= next_send:
                if not cycle:
                    names = self.names()
                    cycle = [(s, n) for n in names for s in socks]
                    random.shuffle(cycle)
                    if not cycle:
                        break
                s, name = cycle.pop()
                qid, q = query(name)
                while qid in pending[s]:
                    qid, q = query(name)
                try:
                    s.sendto(q, ("127.0.0.1", socks[s][1]))
                    pending[s][qid] = (time.time(), name)
                    self.sent += 1
                except OSError:
                    pass
                next_send += interval
            readable, _, _ = select.select(list(socks), [], [], max(0.0, min(next_send - time.monotonic(), 0.05)))
            for s in readable:
                while True:
                    try:
                        m = s.recv(65535)
                    except (BlockingIOError, ConnectionRefusedError):
                        break
                    except OSError:
                        break
                    try:
                        rid, rcode, _tc, addrs = parse(m)
                    except Exception:  # noqa: BLE001 (a malformed answer: count as none)
                        continue
                    sent = pending[s].pop(rid, None)
                    if sent:
                        self.out.write(json.dumps({"t": time.time(), "ts": sent[0], "path": socks[s][0],
                                                   "name": sent[1], "rc": rcode, "addrs": sorted(addrs)}) + "\n")
            if time.monotonic() >= next_expire:
                next_expire = time.monotonic() + 0.2
                cut = time.time() - 2.0
                for s, p in pending.items():
                    for qid in [q for q, (ts, _) in p.items() if ts < cut]:
                        ts, name = p.pop(qid)
                        self.out.write(json.dumps({"t": ts + 2.0, "ts": ts, "path": socks[s][0], "name": name,
                                                   "rc": -1, "addrs": []}) + "\n")
        self.out.close()


# --- the workload
class Workload(threading.Thread):
    def __init__(self, k, ns, rng, actions, stop, min_gangs=2, max_gangs=8):
        super().__init__(daemon=True)
        self.k, self.ns, self.rng, self.actions, self.stop_ev = k, ns, rng, actions, stop
        self.min_gangs, self.max_gangs = min_gangs, max_gangs
        self.lock = threading.Lock()
        self.gangs = {}  # name -> {"size", "deleted": time or None}
        self.next_id = 0
        self.errors = 0

    def names(self):
        now = time.time()
        out = []
        with self.lock:
            for g, v in self.gangs.items():
                if v["deleted"] is None or now - v["deleted"] < 30:
                    out += [f"{g}-{i}.{g}.{self.ns}.svc.{ZONE}" for i in range(v["size"])]
                    out.append(f"{g}.{self.ns}.svc.{ZONE}")
                    out.append(f"{g}-{v['size']}.{g}.{self.ns}.svc.{ZONE}")  # a rank past the gang: never exists
        out += [f"ghost-{i}.g0.{self.ns}.svc.{ZONE}" for i in range(2)] + [f"nope.{self.ns}.svc.{ZONE}"]
        return out

    def job(self, g, size):
        return {"metadata": {"name": g, "labels": {"chaos": "gang"}},
                "spec": {"completions": size, "parallelism": size, "completionMode": "Indexed",
                         "backoffLimit": 1000000,
                         "template": {"metadata": {"labels": {"gang": g}},
                                      "spec": {"subdomain": g, "restartPolicy": "Never",
                                               "containers": [{"name": "trainer", "image": "fake",
                                                               "ports": [{"name": "nccl", "containerPort": 29500}]}]}}}}

    def act(self, action, g, **extra):
        ok, err = True, None
        try:
            if action == "create":
                size = extra["size"]
                self.k.req("POST", f"/api/v1/namespaces/{self.ns}/services", {
                    "metadata": {"name": g},
                    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"gang": g},
                             "ports": [{"name": "nccl", "port": 29500, "protocol": "TCP"}]}})
                self.k.req("POST", f"/apis/batch/v1/namespaces/{self.ns}/jobs", self.job(g, size))
            elif action == "restart-job":
                self.k.req("DELETE", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{g}",
                           {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
                # Made anew under its name once the old one is gone (bounded).
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    r = self.k.try_req("GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{g}")
                    if isinstance(r, urllib.error.HTTPError) and r.code == 404:
                        break
                    time.sleep(0.1)
                self.k.req("POST", f"/apis/batch/v1/namespaces/{self.ns}/jobs", self.job(g, extra["size"]))
            elif action == "restart-pods":
                pods = self.k.req("GET", f"/api/v1/namespaces/{self.ns}/pods?labelSelector=gang%3D{g}")["items"]
                pods = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
                for p in sorted(pods)[: extra["count"]]:
                    self.k.req("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{p}")
            elif action == "delete":
                self.k.req("DELETE", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{g}",
                           {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
                self.k.req("DELETE", f"/api/v1/namespaces/{self.ns}/services/{g}")
        except Exception as e:  # noqa: BLE001 (the API server may be down: logged, the schedule goes on)
            ok, err = False, str(e)[:200]
            self.errors += 1
        self.actions.write(action=action, gang=g, ok=ok, error=err, **extra)

    def run(self):
        while not self.stop_ev.is_set():
            # Every draw happens whatever the API server does, so a seed
            # gives the same sequence of actions.
            pause = self.rng.uniform(1.0, 3.0)
            roll = self.rng.random()
            size = self.rng.choice([2, 4, 4, 8])
            pick = self.rng.random()
            count = self.rng.randint(1, 8)
            with self.lock:
                live = sorted(g for g, v in self.gangs.items() if v["deleted"] is None)
            if len(live) < self.min_gangs or (len(live) < self.max_gangs and roll < 0.35):
                g = f"g{self.next_id}"
                self.next_id += 1
                with self.lock:
                    self.gangs[g] = {"size": size, "deleted": None}
                self.act("create", g, size=size)
            else:
                g = live[int(pick * len(live))]
                with self.lock:
                    gsize = self.gangs[g]["size"]
                if roll < 0.6:
                    self.act("restart-job", g, size=gsize)
                elif roll < 0.8 or len(live) <= self.min_gangs:
                    self.act("restart-pods", g, count=min(count, gsize))
                else:
                    with self.lock:
                        self.gangs[g]["deleted"] = time.time()
                    self.act("delete", g)
            self.stop_ev.wait(pause)


# --- the faults
class Faults:
    def __init__(self, a, k, env, podns_b, rng, record):
        self.a, self.k, self.env, self.b, self.rng, self.record = a, k, env, podns_b, rng, record

    def ctl(self, action):
        r = subprocess.run(["bash", CTL, self.a.cluster, action], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"ctl.sh {action}: {r.stderr.strip()[-300:]}")
        return r.stdout.strip()

    def pid(self, var):
        return int(load_env(self.a.cluster)[var])

    def start_apiserver(self, started):
        """ctl.sh start-apiserver in a thread; returns (thread, box):
        box["ready"] is when /readyz first answered."""
        box = {}

        def run():
            try:
                self.ctl("start-apiserver")
            except Exception as e:  # noqa: BLE001
                box["error"] = str(e)
            box["done"] = time.time()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        started["api_start"] = time.time()
        box["ready"] = wait_until("kube-apiserver /readyz", 180, lambda: self.k.ready() and time.time())
        return t, box

    def apiserver_restart(self, p):
        t0 = time.time()
        self.ctl("stop-apiserver")
        info = {}
        th, box = self.start_apiserver(info)
        th.join(300)
        return {"start": t0, "healed": box["done"], "api_down": [[t0, box["ready"]]],
                "api_started": info["api_start"], **({"error": box["error"]} if "error" in box else {})}

    def apiserver_sigstop(self, p):
        pid = self.pid("APISERVER_PID")
        t0 = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(p["seconds"])  # the fault's own length, not a wait for a state
        finally:
            os.kill(pid, signal.SIGCONT)
        t1 = time.time()
        return {"start": t0, "healed": t1, "api_down": [[t0, t1]]}

    def etcd_compact(self, p):
        t0 = time.time()
        rev = self.ctl("compact")
        return {"start": t0, "healed": time.time(), "revision": rev}

    def kcm_restart(self, p):
        pid = self.pid("CONTROLLER_MANAGER_PID")
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
        port = None
        for i, x in enumerate(argv):
            if x == b"--secure-port":
                port = argv[i + 1].decode()
        t0 = time.time()
        os.kill(pid, signal.SIGTERM)
        wait_until("kube-controller-manager gone", 30,
                   lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z")
        logf = open(os.path.join(self.a.cluster, "logs", "controller-manager.log"), "ab")
        new = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
        logf.close()
        # DIR/env keeps the new pid, so tests/cluster/down.sh still stops it.
        envf = os.path.join(self.a.cluster, "env")
        text = open(envf).read().replace(f"CONTROLLER_MANAGER_PID={pid}\n", f"CONTROLLER_MANAGER_PID={new.pid}\n")
        open(envf, "w").write(text)
        ctx = ssl._create_unverified_context()  # its own self-signed serving certificate, on loopback

        def healthy():
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=1) as f:
                    return f.status == 200
            except Exception:  # noqa: BLE001
                return False
        wait_until("kube-controller-manager /healthz", 120, healthy, 0.2)
        return {"start": t0, "healed": time.time()}

    def podns_start_around_apiserver_restart(self, p):
        t0 = time.time()
        self.b.stop()
        t_stopping = time.time()
        self.ctl("stop-apiserver")
        off = p["offset"]
        if off < 0:
            self.b.start()
            time.sleep(-off)  # the schedule's offset: podns starts that long before the API server
        info = {}
        th, box = self.start_apiserver(info)
        if off >= 0:
            delay = info["api_start"] + off - time.time()
            if delay > 0:
                time.sleep(delay)  # the schedule's offset after the API server's start
            self.b.start()
        th.join(300)
        # Healed: podns-b ready again (bounded), and the control plane back.
        ready = None
        try:
            ready = wait_until("podns-b /readyz", 120, lambda: is_ready(self.b.admin) and time.time(), 0.1)
        except RuntimeError:
            pass
        return {"start": t0, "healed": max(box["done"], ready or box["done"]), "api_down": [[t_stopping, box["ready"]]],
                "api_started": info["api_start"], "podns_b_ready": ready,
                **({"error": box["error"]} if "error" in box else {})}

    def params(self, kind):
        long = self.a.schedule == "long"
        if kind == "apiserver-sigstop":
            return {"seconds": round(self.rng.uniform(5, 30 if long else 15), 1)}
        if kind == "podns-start-around-apiserver-restart":
            return {"offset": round(self.rng.uniform(-3, 10 if long else 5), 1)}
        return {}

    def inject(self, kind, p):
        log(f"fault {kind} {p}")
        fn = getattr(self, kind.replace("-", "_"))
        try:
            r = fn(p)
        except Exception as e:  # noqa: BLE001 (recorded; the control plane is checked before the next)
            r = {"start": time.time(), "healed": time.time(), "error": str(e)[:300]}
        self.record.write(fault=kind, params=p, **r)
        log(f"fault {kind} healed after {r['healed'] - r['start']:.1f} s{' ERROR ' + r['error'] if 'error' in r else ''}")
        # Never stack faults: the control plane is back before the next.
        wait_until("kube-apiserver back", 180, self.k.ready, 0.2)
        return r


def run(a):
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    env = load_env(a.cluster)
    k = Kube(a.cluster)
    k8s = env.get("K8S_VERSION", "")
    cache_bin = os.path.join(os.environ.get("PODNS_CLUSTER_CACHE", os.path.expanduser("~/.cache/podns-cluster")), "bin")
    oracle = a.oracle or os.path.join(cache_bin, f"podns-oracle-{k8s}")
    for what, path in (("oracle", oracle), ("podns", a.podns), ("coredns", env["COREDNS"])):
        if not os.access(path, os.X_OK):
            sys.exit(f"chaos.py: no {what} at {path}" +
                     (f" (tests/cluster/build.sh --k8s {k8s} oracle)" if what == "oracle" else ""))
    # A copy of podns: a rebuild of the tree meanwhile must not change
    # the binary podns-b restarts with.
    binary = os.path.join(out, "podns")
    if os.path.realpath(a.podns) != os.path.realpath(binary):
        shutil.copy2(a.podns, binary)
    seed = a.seed
    duration = a.duration or (300 if a.schedule == "short" else 1800)
    meta = {"seed": seed, "schedule": a.schedule, "duration": duration, "k8s": k8s, "bound": a.bound,
            "cache_allowance": a.cache_allowance, "start_grace": a.start_grace, "settle": a.settle,
            "rate": a.rate, "podns": a.podns, "baseline": [] if a.no_baseline else ["coredns-k8s"],
            "podns_version": subprocess.run([a.podns, "--version"], capture_output=True, text=True).stdout.strip(), "coredns": env["COREDNS"], "oracle": os.path.realpath(oracle),
            "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "start": time.time()}
    ns = a.namespace
    log(f"namespace {ns}")
    k.try_req("DELETE", f"/api/v1/namespaces/{ns}")
    wait_until(f"namespace {ns} gone", 180,
               lambda: isinstance(k.try_req("GET", f"/api/v1/namespaces/{ns}"), urllib.error.HTTPError), 0.5)
    k.req("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    wait_until(f"{ns}/default ServiceAccount", 120,
               lambda: not isinstance(k.try_req("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default"), Exception))

    events = Jsonl(os.path.join(out, "servers.jsonl"))
    procs = []
    stop = threading.Event()
    try:
        orc = Proc("oracle", [oracle, "--kubeconfig", env["KUBECONFIG"], "--namespace", ns,
                              "--out", os.path.join(out, "truth.jsonl")], os.path.join(out, "oracle.log")).start()
        procs.append(orc)
        wait_until("the oracle's first lists", 120,
                   lambda: os.path.exists(os.path.join(out, "truth.jsonl")) and
                   '"synced"' in open(os.path.join(out, "truth.jsonl")).read())
        pa = Podns("podns-a", binary, env["KUBECONFIG"], out, events).start()
        pb = Podns("podns-b", binary, env["KUBECONFIG"], out, events).start()
        procs += [pa, pb]
        cport = free_port()
        corefile = os.path.join(out, "Corefile")
        with open(corefile, "w") as f:
            f.write(f"{ZONE}:{cport} {{\n    bind 127.0.0.1\n    errors\n    cache 30\n"
                    f"    forward . 127.0.0.1:{pa.dns} 127.0.0.1:{pb.dns}\n}}\n")
        cd = Proc("coredns", [env["COREDNS"], "-conf", corefile], os.path.join(out, "coredns.log")).start()
        procs.append(cd)
        paths = {"podns-a": pa.dns, "podns-b": pb.dns, "coredns": cport}
        if not a.no_baseline:
            kport = free_port()
            kcf = os.path.join(out, "Corefile.k8s")
            with open(kcf, "w") as f:
                f.write(f"{ZONE}:{kport} {{\n    bind 127.0.0.1\n    errors\n    cache 30\n"
                        f"    kubernetes {ZONE} {{\n        kubeconfig {env['KUBECONFIG']}\n        ttl 5\n    }}\n}}\n")
            ck = Proc("coredns-k8s", [env["COREDNS"], "-conf", kcf], os.path.join(out, "coredns-k8s.log")).start()
            procs.append(ck)
            wait_until("coredns-k8s answering", 120, dns_probe(kport), 0.2)
            paths["coredns-k8s"] = kport
        for p in (pa, pb):
            wait_until(f"{p.name} /readyz", 120, lambda p=p: is_ready(p.admin), 0.1)
        probe = dns_probe(cport)
        wait_until("coredns answering", 60, probe, 0.2)
        log(f"paths {paths}; seed {seed}, {a.schedule}, {duration} s")

        actions = Jsonl(os.path.join(out, "actions.jsonl"))
        faults_rec = Jsonl(os.path.join(out, "faults.jsonl"))
        wl = Workload(k, ns, random.Random(f"{seed}/workload"), actions, stop)
        prober = Prober(paths, wl.names, a.rate,
                        os.path.join(out, "answers.jsonl"), stop)
        t_start = time.time()
        meta["t0"] = t_start
        json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)
        wl.start()
        prober.start()
        frng = random.Random(f"{seed}/faults")
        faults = Faults(a, k, env, pb, frng, faults_rec)
        warm, quiet = 25, 25
        end = t_start + duration
        stop.wait(warm)
        order = []
        while True:
            if not order:
                order = FAULTS[:]
                frng.shuffle(order)
            kind = order.pop(0)
            p = faults.params(kind)
            gap = round(frng.uniform(15, 30), 1)
            # Room for the fault, its settle and the quiet end, else stop here.
            if time.time() + 60 + quiet > end:
                break
            faults.inject(kind, p)
            stop.wait(gap)
        left = end - time.time()
        if left > 0:
            stop.wait(left)
        log(f"schedule done: {prober.sent} questions, {wl.errors} workload requests failed")
        stop.set()
        wl.join(30)
        prober.join(30)
        meta["end"] = time.time()
        json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)
    finally:
        stop.set()
        for p in reversed(procs):
            p.stop()
        k.try_req("DELETE", f"/api/v1/namespaces/{ns}")
    return classify(out)


def dns_probe(port):
    def f():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.5)
        try:
            qid, q = query(f"kubernetes.default.svc.{ZONE}")
            s.sendto(q, ("127.0.0.1", port))
            m = s.recv(65535)
            return parse(m)[1] == 0
        except OSError:
            return False
        finally:
            s.close()
    return f


# --- the judge
class Truth:
    """Per name, the oracle's (time, kind, addresses) history."""

    def __init__(self, path):
        self.hist = defaultdict(list)
        self.kind = {}
        self.synced = None
        self.last_t = 0
        for line in open(path):
            r = json.loads(line)
            self.last_t = max(self.last_t, r["t"])
            if r["ev"] == "synced" and self.synced is None:
                self.synced = r["t"]
            elif r["ev"] == "name":
                self.hist[r["name"]].append((r["t"], frozenset(r["addrs"])))
                self.kind[r["name"]] = r["kind"]
        self.memo = {}

    def intervals(self, name):
        """[(from, until, addrs)], the empty set from the beginning of time
        until the first record."""
        if name not in self.memo:
            self.memo[name] = self._intervals(name)
        return self.memo[name]

    def _intervals(self, name):
        h = self.hist.get(name, [])
        out, prev_t, prev = [], float("-inf"), frozenset()
        for t, s in h:
            out.append((prev_t, t, prev))
            prev_t, prev = t, s
        out.append((prev_t, float("inf"), prev))
        return out


def matches(kind, answer, truth):
    if not answer:
        return not truth
    if kind == "set":
        return answer == truth
    return bool(truth) and answer <= truth


def judge(ans, truth, api_down, starts, bound, cache_allowance, start_grace):
    """(class, staleness or lead or None) of one answer."""
    t, path, name = ans["t"], ans["path"], ans["name"]
    rc = ans["rc"]
    if rc == -1:
        return "no-answer", None
    if rc == 2:
        if any(a <= t and b >= t - bound for a, b in api_down):
            return "unavailable", None
        servers = {"coredns": ["podns-a", "podns-b"], "coredns-k8s": []}.get(path, [path])
        if any(any(t - start_grace <= s <= t for s in starts.get(srv, [])) for srv in servers):
            return "unavailable", None
        return "wrong-servfail", None
    if rc not in (0, 3):
        return "wrong-never", None
    answer = frozenset(ans["addrs"]) if rc == 0 else frozenset()
    kind = truth.kind.get(name, "host")
    allow = bound + (cache_allowance if path.startswith("coredns") else 0)
    ivs = truth.intervals(name)
    cur = [iv for iv in ivs if iv[0] <= t < iv[1]][0]
    if matches(kind, answer, cur[2]):
        return "right", None
    past = [iv for iv in ivs if iv[1] <= t and matches(kind, answer, iv[2])]
    future = [iv[0] - t for iv in ivs if iv[0] > t and matches(kind, answer, iv[2])]
    st = t - max(iv[1] for iv in past) if past else float("inf")
    ld = min(future) if future else float("inf")
    # The nearer explanation: a truth that ended st ago, or one the oracle
    # recorded ld later (both can fit an answer given as the truth moved).
    if st <= allow and st <= ld:
        return "stale", st
    if ld <= bound:
        return "early", ld
    if st <= allow:
        return "stale", st
    if past:
        return ("wrong-nxdomain" if not answer else "wrong-stale"), t - max(iv[1] for iv in past)
    return "wrong-never", None


def classify(out, a=None):
    meta = json.load(open(os.path.join(out, "meta.json")))
    bound = a.bound if a and a.bound is not None else meta["bound"]
    cache_allowance = meta["cache_allowance"]
    start_grace = meta["start_grace"]
    settle = meta["settle"]
    truth = Truth(os.path.join(out, "truth.jsonl"))
    faults = [json.loads(x) for x in open(os.path.join(out, "faults.jsonl"))] \
        if os.path.exists(os.path.join(out, "faults.jsonl")) else []
    api_down = [tuple(w) for f in faults for w in f.get("api_down", [])]
    starts = defaultdict(list)
    ready_after = []
    last_start = {}
    for line in open(os.path.join(out, "servers.jsonl")):
        r = json.loads(line)
        if r["event"] == "start":
            starts[r["server"]].append(r["t"])
            last_start[r["server"]] = r["t"]
        elif r["event"] == "ready" and r["server"] in last_start:
            ready_after.append((r["server"], r["t"] - last_start[r["server"]]))

    def window(t):
        for f in faults:
            if f["start"] <= t < f["healed"] + settle:
                return f["fault"]
        return "none"

    counts = Counter()
    worst = defaultdict(float)  # (fault, path) -> worst staleness among stale answers
    worst_wrong = defaultdict(float)
    lead = defaultdict(float)
    wrong = []
    total = 0
    end = meta.get("end", float("inf"))
    for line in open(os.path.join(out, "answers.jsonl")):
        ans = json.loads(line)
        # Judged only while the oracle ran and had listed.
        if truth.synced is None or ans["t"] < truth.synced or ans["t"] > min(truth.last_t, end):
            continue
        total += 1
        c, x = judge(ans, truth, api_down, starts, bound, cache_allowance, start_grace)
        w = window(ans["t"])
        counts[(w, ans["path"], c)] += 1
        if c == "stale":
            worst[(w, ans["path"])] = max(worst[(w, ans["path"])], x)
        elif c == "early":
            lead[(w, ans["path"])] = max(lead[(w, ans["path"])], x)
        elif c.startswith("wrong"):
            if x is not None:
                worst_wrong[(w, ans["path"])] = max(worst_wrong[(w, ans["path"])], x)
            ivs = truth.intervals(ans["name"])
            ahead = [iv[0] - ans["t"] for iv in ivs if iv[0] > ans["t"] and matches(
                truth.kind.get(ans["name"], "host"), frozenset(ans["addrs"]) if ans["rc"] == 0 else frozenset(), iv[2])]
            wrong.append({**ans, "class": c, "age": x, "fault": w, "oracle_later_s": min(ahead, default=None),
                          "truth_now": sorted([iv for iv in truth.intervals(ans["name"]) if iv[0] <= ans["t"] < iv[1]][0][2])})
    with open(os.path.join(out, "wrong.jsonl"), "w") as f:
        for w in wrong:
            f.write(json.dumps(w) + "\n")
    paths = sorted({p for _, p, _ in counts})
    kinds = [k for k in ["none"] + FAULTS if any(w == k for w, _, _ in counts)]
    with open(os.path.join(out, "report.csv"), "w") as f:
        f.write("fault,path,class,count\n")
        for (w, p, c), n in sorted(counts.items()):
            f.write(f"{w},{p},{c},{n}\n")
    n_faults = Counter(f["fault"] for f in faults)
    lines = [f"# Chaos run: seed {meta['seed']}, {meta['schedule']} schedule, Kubernetes {meta['k8s']}",
             "",
             f"{meta.get('podns_version') or 'podns'} ({meta['podns']}; harness at {meta['commit']}), "
             f"CoreDNS {os.path.basename(os.path.realpath(meta.get('coredns', 'coredns')))}, {total} answers judged over "
             f"{(meta.get('end', truth.last_t) - meta.get('t0', meta['start'])):.0f} s; bound {bound} s "
             f"(+{cache_allowance} s on the coredns path), SERVFAIL allowed within {start_grace} s of a podns start "
             f"or while the API server was down; windows: injection to heal + {settle} s.",
             "",
             "| fault (injections) | path | right | stale | early | unavailable | no answer | wrong | worst staleness | worst lead |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in kinds:
        for p in paths:
            c = {cl: counts[(w, p, cl)] for cl in CLASSES}
            if not sum(c.values()):
                continue
            nw = sum(v for cl, v in c.items() if cl.startswith("wrong"))
            detail = ", ".join(f"{cl[6:]} {v}" for cl, v in c.items() if cl.startswith("wrong") and v)
            lines.append(f"| {w}{'' if w == 'none' else f' ({n_faults[w]})'} | {p} | {c['right']} | {c['stale']} | "
                         f"{c['early']} | {c['unavailable']} | {c['no-answer']} | {nw}{f' ({detail})' if detail else ''} | "
                         f"{worst[(w, p)]:.2f} s | {lead[(w, p)]:.2f} s |")
    baseline = set(meta.get("baseline", []))
    tot, tot_base = Counter(), Counter()
    for (w, p, c), n in counts.items():
        (tot_base if p in baseline else tot)[c] += n
    nwrong = sum(v for c, v in tot.items() if c.startswith("wrong"))
    nwrong_base = sum(v for c, v in tot_base.items() if c.startswith("wrong"))

    def worst_of(d, keep):
        return max((v for (w, p), v in d.items() if keep(p)), default=0)

    def direct(p):
        return p not in baseline and not p.startswith("coredns")

    def cached(p):
        return p not in baseline and p.startswith("coredns")
    lines += ["", "Through podns: " + ", ".join(f"{c} {tot[c]}" for c in CLASSES if tot[c]) + f"; **wrong {nwrong}**. "
              f"Worst staleness of a stale answer: {worst_of(worst, direct):.2f} s asking podns, "
              f"{worst_of(worst, cached):.2f} s through CoreDNS's cache"
              + (f"; oldest wrong answer {max(worst_wrong.values()):.2f} s" if nwrong and worst_wrong else "") + "."]
    if baseline:
        lines += ["", f"Baseline ({', '.join(sorted(baseline))}, not counted in the exit status): " +
                  ", ".join(f"{c} {tot_base[c]}" for c in CLASSES if tot_base[c]) + f"; wrong {nwrong_base}. "
                  f"Worst staleness of a stale answer: {worst_of(worst, lambda p: p in baseline):.2f} s; "
                  f"oldest wrong answer: {worst_of(worst_wrong, lambda p: p in baseline):.2f} s."]
    lines += ["",
              "podns ready after start: " + (", ".join(f"{s} {d:.1f} s" for s, d in ready_after) or "—") + "."]
    for f in faults:
        lines.append(f"- {f['fault']} {f.get('params', {})}: healed after {f['healed'] - f['start']:.1f} s"
                     + (f", API server down {sum(b - a for a, b in f.get('api_down', [])):.1f} s (SIGTERM or SIGSTOP to /readyz)"
                        if f.get("api_down") else "")
                     + (f", ERROR {f['error']}" if f.get("error") else ""))
    if wrong:
        lines += ["", f"First wrong answers (all {len(wrong)} in wrong.jsonl):", ""]
        for w in wrong[:10]:
            lines.append(f"- {time.strftime('%H:%M:%S', time.gmtime(w['t']))} {w['path']} {w['name']} rc={w['rc']} "
                         f"{w['addrs']} truth {w['truth_now']} ({w['class']}, age {w['age']}, during {w['fault']})")
    report = "\n".join(lines) + "\n"
    open(os.path.join(out, "report.md"), "w").write(report)
    print(report)
    if total == 0 or truth.synced is None:
        print("chaos.py: nothing could be judged", file=sys.stderr)
        return 1
    return 1 if nwrong else 0


def selftest():
    """The judge on a history written by hand: each answer's class is known."""
    t0 = 1000.0
    truth = Truth.__new__(Truth)
    truth.hist, truth.kind, truth.memo = defaultdict(list), {}, {}
    for t, name, kind, addrs in [(10, "a", "host", ["10.0.0.1"]), (20, "a", "host", ["10.0.0.1", "10.0.0.2"]),
                                 (21, "a", "host", ["10.0.0.2"]), (40, "a", "host", []),
                                 (10, "s", "set", ["10.0.0.1", "10.0.0.2"])]:
        truth.hist[name].append((t0 + t, frozenset(addrs)))
        truth.kind[name] = kind
    starts = {"podns-b": [t0 + 15]}
    cases = [
        (5, "podns-a", "a", 3, [], "right"),                       # before it exists
        (11, "podns-a", "a", 3, [], "stale"),                      # 1 s after it was published
        (13, "podns-a", "a", 3, [], "wrong-nxdomain"),             # 3 s after: past the bound
        (20.5, "podns-a", "a", 0, ["10.0.0.1"], "right"),          # one pod of a restart overlap
        (22, "podns-a", "a", 0, ["10.0.0.1"], "stale"),
        (25, "podns-a", "a", 0, ["10.0.0.1"], "wrong-stale"),
        (25, "coredns", "a", 0, ["10.0.0.1"], "stale"),            # within the cache's allowance
        (30, "coredns", "a", 0, ["10.0.0.1"], "wrong-stale"),
        (25, "podns-a", "a", 0, ["10.0.0.9"], "wrong-never"),
        (39, "podns-a", "a", 3, [], "early"),                      # podns saw the delete 1 s first
        (30, "podns-a", "a", 3, [], "wrong-nxdomain"),             # 10 s before the delete: not early
        (30, "podns-a", "a", 2, [], "wrong-servfail"),
        (30, "podns-b", "a", 2, [], "unavailable"),                # 15 s after its start
        (30, "coredns", "a", 2, [], "unavailable"),                # an upstream started 15 s ago
        (30, "coredns-k8s", "a", 2, [], "wrong-servfail"),
        (30, "podns-a", "a", -1, [], "no-answer"),
        (30, "podns-a", "s", 0, ["10.0.0.1"], "wrong-never"),      # a set is judged whole
        (30, "podns-a", "s", 0, ["10.0.0.1", "10.0.0.2"], "right"),
        (30, "podns-a", "ghost", 3, [], "right"),
        (30, "podns-a", "ghost", 0, ["10.0.0.1"], "wrong-never"),
    ]
    bad = 0
    for t, path, name, rc, addrs, want in cases:
        got, _ = judge({"t": t0 + t, "path": path, "name": name, "rc": rc, "addrs": addrs},
                       truth, [(t0 + 50, t0 + 60)], starts, 2.0, 5.0, 30.0)
        if got != want:
            bad += 1
            print(f"selftest: {path} {name} rc={rc} {addrs} at +{t} s: {got}, want {want}", file=sys.stderr)
    # SERVFAIL while the API server was down within the bound.
    got, _ = judge({"t": t0 + 61, "path": "podns-a", "name": "a", "rc": 2, "addrs": []},
                   truth, [(t0 + 50, t0 + 60)], starts, 2.0, 5.0, 30.0)
    if got != "unavailable":
        bad += 1
        print(f"selftest: SERVFAIL 1 s after the API server came back: {got}", file=sys.stderr)
    print(f"chaos.py selftest: {len(cases) + 1 - bad} of {len(cases) + 1} judged as written")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a schedule and judge it")
    r.add_argument("--cluster", required=True, help="a tests/cluster/up.sh DIR")
    r.add_argument("--podns", default=os.path.join(REPO, "target", "debug", "podns"))
    r.add_argument("--oracle", help="default: build.sh's podns-oracle-<the cluster's release>")
    r.add_argument("--schedule", choices=["short", "long"], default="short")
    r.add_argument("--duration", type=float, help="seconds (short: 300, long: 1800)")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--rate", type=float, default=300, help="questions/s over all paths")
    r.add_argument("--bound", type=float, default=2.0, help="staleness bound, s")
    r.add_argument("--cache-allowance", type=float, default=5.0, help="added to the bound on the coredns path, s")
    r.add_argument("--start-grace", type=float, default=30.0, help="SERVFAIL allowed this long after a podns start, s")
    r.add_argument("--settle", type=float, default=15.0, help="a fault's window lasts this long past its heal, s")
    r.add_argument("--namespace", default="podns-chaos")
    r.add_argument("--no-baseline", action="store_true", help="leave CoreDNS's kubernetes plugin out")
    r.add_argument("--out", required=True)
    c = sub.add_parser("classify", help="judge a run's answers again")
    c.add_argument("out")
    c.add_argument("--bound", type=float)
    sub.add_parser("selftest", help="the judge on a hand-written history (no cluster)")
    a = ap.parse_args()
    if a.cmd == "selftest":
        sys.exit(selftest())
    if a.cmd == "run":
        sys.exit(run(a))
    sys.exit(classify(a.out, a))


if __name__ == "__main__":
    main()
