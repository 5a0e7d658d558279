"""Fault matrix under load (issue 7), driven by benches/harness/faults.sh.

python3 benches/harness/faults.py API_URL DNS_PORT ADMIN_PORT OUT_JSON [PHASES]
python3 benches/harness/faults.py --table OUT_JSON
python3 benches/harness/faults.py --recovery ...   (N replicas, resume vs relist: see
                                                     "Recovery with N replicas" below)

The simulator (`podns sim --kubelet`) and `podns serve` are already running
(faults.sh starts them). For each phase (default: none drop compact outage
throttle latency), one after another:

  * dnsperf at QPS (env, default 10000) for PRE + fault duration + POST seconds
    over every pod name (`<hostname>.<subdomain>.<ns>.svc.cluster.local A`);
  * /sim/churn at CHURN pod replacements/s (env, default 500; each is a delete
    plus a create plus the kubelet's status writes) for the same time;
  * a checker thread asking CHECK_QPS (default 1000) random pod names over UDP
    and keeping every answer;
  * /readyz sampled every 100 ms;
  * /sim/stats every 200 ms (when podns's pod watch is accepted again);
  * after PRE seconds the fault:
      drop      POST /sim/faults/drop-watches (the watches resume from their
                resourceVersion)
      compact   POST /sim/faults/compact then drop-watches: the resume gets
                410 Expired, which forces a relist
      outage    POST /sim/faults/outage?seconds=30 (503 for everything, watches
                dropped)
      throttle  POST /sim/faults/throttle?seconds=20 then drop-watches (429 with
                Retry-After and details.retryAfterSeconds = time left)
      latency   POST /sim/faults/latency?ms=2000&seconds=20 then drop-watches
                (every API request, including the re-watch, waits 2 s)

Definitions (what the table counts):
  stable name   a pod name whose pod has the same uid and IP in the
                simulator's pod list taken before the phase and after it, i.e.
                churn did not replace it during the phase;
  wrong (during) a checker answer for a stable name that is not NOERROR with
                exactly the pod's IP (a different address, NXDOMAIN, SERVFAIL
                or no answer in 1 s are each counted on their own);
  wrong (after) after the phase, once churn has stopped and a canary write has
                propagated (so the watch has caught up with everything before
                it): every name is asked once; a wrong answer is one whose
                address set differs from the simulator's IP for a pod that had
                the same uid and IP in the lists taken just before and just
                after this sweep (plus NXDOMAIN/SERVFAIL for those names);
  relists       `list` requests from podns during the phase (from /sim/stats),
                plus its watch restarts for 410 Expired (podns_watch_restarts
                {reason="expired_410"}): podns relists with a streaming list
                (a watch with sendInitialEvents), which the simulator counts
                as a `watch`;
  API requests during throttle: every request from podns while the throttle
                was on (from /sim/stats, the script makes none then), and how
                many got 429;
  recovery      from the end of the fault (its injection, for drop and compact)
                until podns answers the new IP of a pod whose status was
                PATCHed at that moment (the canary; poll every 1 ms).

Everything is loopback; pod IPs are data. Every loop is bounded by a deadline.
"""

import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnsq import parse, query  # noqa: E402
from promtext import scrape  # noqa: E402

if sys.argv[1] == "--recovery":
    api = sys.argv[2]
elif sys.argv[1] not in ("--table", "--recovery-table"):
    api, dns_port, admin_port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    phases = (sys.argv[5] if len(sys.argv) > 5 else "none drop compact outage throttle latency").split()
QPS = int(os.environ.get("QPS", "10000"))
CHURN = float(os.environ.get("CHURN", "500"))
CHECK_QPS = int(os.environ.get("CHECK_QPS", "1000"))
PRE = float(os.environ.get("PRE", "5"))
POST = float(os.environ.get("POST", "20"))
ZONE = "cluster.local"
own = {"list": 0, "patch": 0}  # the script's own API requests, not podns's


def req(method, path, body=None, ctype="application/json", timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(api + path, data=data, method=method)
    if data is not None:
        r.add_header("content-type", ctype)
    with urllib.request.urlopen(r, timeout=timeout) as f:
        return json.loads(f.read() or b"null")


def pods():
    """{fqdn: (pod name, namespace, uid, ip)} for pods with an IP and a hostname."""
    own["list"] += 1
    items = req("GET", "/api/v1/pods")["items"]
    m = {}
    for p in items:
        spec, meta, st = p.get("spec", {}), p["metadata"], p.get("status", {})
        host, sub, ip = spec.get("hostname"), spec.get("subdomain"), st.get("podIP")
        if not (host and sub and ip) or meta.get("deletionTimestamp"):
            continue
        m[f"{host}.{sub}.{meta['namespace']}.svc.{ZONE}"] = (meta["name"], meta["namespace"], meta["uid"], ip)
    return m


def metrics():
    return scrape(f"http://127.0.0.1:{admin_port}/metrics", timeout=5)


def podns_requests(stats):
    """{verb: {resource: n}} without the simulator's own controls (a request a fault
    refused counts as verb `fault`)."""
    return {v: r for v, r in stats["requests"].items() if v != "sim"}


def diff_requests(a, b):
    d = {}
    for verb, res in b.items():
        for r, n in res.items():
            k = n - a.get(verb, {}).get(r, 0)
            if k:
                d[f"{verb} {r}"] = k
    return d


class Udp:
    def __init__(self, timeout=1.0):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.settimeout(timeout)

    def ask(self, name):
        """(rcode, sorted addrs), or (-1, []) on timeout."""
        qid, q = query(name)
        self.s.sendto(q, ("127.0.0.1", dns_port))
        try:
            while True:
                m, _ = self.s.recvfrom(65535)
                rid, rcode, _tc, addrs = parse(m)
                if rid == qid:
                    return rcode, sorted(addrs)
        except socket.timeout:
            return -1, []


def checker(names, stop, results):
    c = Udp()
    period = 1.0 / CHECK_QPS
    nxt = time.perf_counter()
    while not stop.is_set():
        name = random.choice(names)
        rc, addrs = c.ask(name)
        results.append((time.time(), name, rc, addrs))
        nxt += period
        d = nxt - time.perf_counter()
        if d > 0:
            time.sleep(d)
        elif d < -1:
            nxt = time.perf_counter()


def readyz_sampler(stop, samples):
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1) as f:
                samples.append((time.time(), f.status))
        except urllib.error.HTTPError as e:
            samples.append((time.time(), e.code))
        except Exception:
            samples.append((time.time(), 0))
        time.sleep(0.1)


def stats_sampler(stop, samples):
    """/sim/stats every 200 ms: when did podns's watches come back."""
    while not stop.is_set():
        try:
            st = req("GET", "/sim/stats", timeout=5)
            samples.append((time.time(), st["requests"].get("watch", {}), st["requests"].get("fault", {})))
        except Exception:
            pass
        time.sleep(0.2)


canary_n = [0]


def canary(t_from, m, limit=120.0):
    """PATCH a pod (from the list m) to a fresh IP now; seconds from t_from
    until podns answers it. A pod that churn replaced (404, or its IP no
    longer ours) is swapped for another; the clock keeps running."""
    c = Udp(timeout=0.05)
    deadline = time.time() + limit
    items = list(m.items())
    while time.time() < deadline:
        fqdn, (name, ns, _uid, _ip) = random.choice(items)
        canary_n[0] += 1
        n = canary_n[0]
        ip = f"10.14.{(n >> 8) & 255}.{n & 255}"
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        own["patch"] += 1
        try:
            req("PATCH", path + "/status", {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}},
                "application/merge-patch+json")
        except Exception:  # replaced by churn meanwhile, or the fault is still on
            time.sleep(0.01)
            continue
        check_at = time.time() + 1
        while time.time() < deadline:
            rc, addrs = c.ask(fqdn)
            if rc == 0 and addrs == [ip]:
                return time.time() - t_from
            if time.time() > check_at:
                check_at = time.time() + 1
                own["get"] = own.get("get", 0) + 1
                try:
                    still = req("GET", path).get("status", {}).get("podIP") == ip
                except Exception:
                    still = False
                if not still:
                    break
            time.sleep(0.001)
    return None


def dnsperf(names_file, secs):
    return subprocess.Popen(
        ["dnsperf", "-s", "127.0.0.1", "-p", str(dns_port), "-d", names_file, "-Q", str(QPS),
         "-l", str(int(secs)), "-c", "1", "-t", "1", "-q", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def parse_dnsperf(text):
    r = {}
    for k, pat in [("sent", r"Queries sent:\s+(\d+)"), ("completed", r"Queries completed:\s+(\d+)"),
                   ("lost", r"Queries lost:\s+(\d+)"), ("qps", r"Queries per second:\s+([\d.]+)"),
                   ("avg_latency_s", r"Average Latency \(s\):\s+([\d.]+)")]:
        m = re.search(pat, text)
        r[k] = float(m.group(1)) if m else None
    m = re.search(r"Response codes:\s+(.*)", text)
    r["rcodes"] = {k: int(v) for k, v in re.findall(r"(\w+) (\d+) \(", m.group(1))} if m else {}
    return r


def sweep(c, m):
    return {fqdn: c.ask(fqdn) for fqdn in m}


def after_check():
    """Every name once, against lists taken just before and after the sweep."""
    c = Udp()
    before = pods()
    answers = sweep(c, before)
    after = pods()
    wrong = nx = sf = lost = checked = 0
    examples = []
    for fqdn, (_n, _ns, uid, ip) in before.items():
        a = after.get(fqdn)
        if not a or a[2] != uid or a[3] != ip:
            continue
        checked += 1
        rc, addrs = answers[fqdn]
        if rc == 0 and addrs == [ip]:
            continue
        if rc == 3:
            nx += 1
        elif rc == 2:
            sf += 1
        elif rc == -1:
            lost += 1
        else:
            wrong += 1
        if len(examples) < 5:
            examples.append({"name": fqdn, "want": ip, "rcode": rc, "got": addrs})
    return {"checked": checked, "wrong": wrong, "nxdomain": nx, "servfail": sf, "timeout": lost,
            "examples": examples}


FAULTS = {  # name: (duration s, [requests at injection])
    "none": (0, []),
    "drop": (0, ["/sim/faults/drop-watches"]),
    "compact": (0, ["/sim/faults/compact", "/sim/faults/drop-watches"]),
    "outage": (30, ["/sim/faults/outage?seconds=30"]),
    "throttle": (20, ["/sim/faults/throttle?seconds=20", "/sim/faults/drop-watches"]),
    "latency": (20, ["/sim/faults/latency?ms=2000&seconds=20", "/sim/faults/drop-watches"]),
}


def run_phase(fault, names_file):
    dur, posts = FAULTS[fault]
    total = PRE + dur + POST
    print(f"[{time.strftime('%T')}] phase {fault}: {total:.0f} s at {QPS} q/s, churn {CHURN}/s",
          file=sys.stderr)
    before = pods()
    own0 = dict(own)
    stats0 = req("GET", "/sim/stats")
    met0 = metrics()
    names = list(before)
    stop = threading.Event()
    checks, ready, st_samples = [], [], []
    threads = [threading.Thread(target=checker, args=(names, stop, checks)),
               threading.Thread(target=readyz_sampler, args=(stop, ready)),
               threading.Thread(target=stats_sampler, args=(stop, st_samples))]
    for t in threads:
        t.start()
    perf = dnsperf(names_file, total)
    req("POST", "/sim/churn", {"rate": CHURN, "seconds": total})
    t0 = time.time()
    time.sleep(PRE)
    s_a = req("GET", "/sim/stats")
    t_inject = time.time()
    for p in posts:
        req("POST", p)
    during = {}
    if dur:
        time.sleep(max(0.0, t_inject + dur - time.time()))
        s_b = req("GET", "/sim/stats")
        during = {
            "podns_requests": diff_requests(podns_requests(s_a), podns_requests(s_b)),
            "responses": {k: v - s_a["responses"].get(k, 0) for k, v in s_b["responses"].items()
                          if v - s_a["responses"].get(k, 0)},
        }
    t_end = time.time()
    recovery = canary(t_end, before)
    out_text, _ = perf.communicate(timeout=total + 60)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    time.sleep(max(0.0, t0 + total + 1 - time.time()))  # churn over
    stats1 = req("GET", "/sim/stats")
    own1 = dict(own)
    met1 = metrics()
    after_pods = pods()
    stable = {f: v for f, v in before.items()
              if f in after_pods and after_pods[f][2] == v[2] and after_pods[f][3] == v[3]}
    cw = {"checked": 0, "ok": 0, "wrong_address": 0, "nxdomain": 0, "servfail": 0, "timeout": 0}
    all_rc = {}
    examples = []
    for (_t, name, rc, addrs) in checks:
        all_rc[rc] = all_rc.get(rc, 0) + 1
        if name not in stable:
            continue
        cw["checked"] += 1
        ip = stable[name][3]
        if rc == 0 and addrs == [ip]:
            cw["ok"] += 1
            continue
        k = {0: "wrong_address", 3: "nxdomain", 2: "servfail", -1: "timeout"}.get(rc, "wrong_address")
        cw[k] += 1
        if len(examples) < 5:
            examples.append({"t": round(_t - t_inject, 3), "name": name, "want": ip, "rcode": rc,
                             "got": addrs})
    # a canary write lands before the after-check (so the watch has caught up)
    settle = canary(time.time(), after_pods)
    after = after_check()
    reqs = diff_requests(podns_requests(stats0), podns_requests(stats1))
    # the script's own lists and patches are not podns's
    # (its lists all fall outside the stats0..stats1 window)
    for k, verb in (("patch pods", "patch"), ("get pods", "get")):
        if k in reqs:
            reqs[k] -= own1.get(verb, 0) - own0.get(verb, 0)
            if not reqs[k]:
                del reqs[k]
    relists = sum(v for k, v in reqs.items() if k.startswith("list "))
    restarts = {k: met1[k] - met0.get(k, 0) for k in met1
                if k.startswith("podns_watch_restarts") and met1[k] - met0.get(k, 0)}
    rcodes = {k: met1[k] - met0.get(k, 0) for k in met1
              if k.startswith("podns_dns_responses") and met1[k] - met0.get(k, 0)}
    not_ready = sum(1 for _t, s in ready if s != 200)
    # When podns's pod watch was accepted again (from the injection): the
    # first sample after the injection whose successful `watch pods` grew.
    rewatch = None
    base = None
    for t, w, _f in st_samples:
        if t < t_inject:
            base = w.get("pods", 0)
            continue
        if base is not None and w.get("pods", 0) > base:
            rewatch = round(t - t_inject, 2)
            break
    nx_by_s = {}
    for (t, _name, rc, _a) in checks:
        if rc == 3:
            k = int(t - t_inject) if t >= t_inject else -1 - int(t_inject - t)
            nx_by_s[k] = nx_by_s.get(k, 0) + 1
    res = {
        "fault": fault, "duration_s": dur, "posts": posts, "load_qps": QPS, "churn_per_s": CHURN,
        "phase_s": total,
        "pod_mutations": stats1["pod_mutations"] - stats0["pod_mutations"],
        "dnsperf": parse_dnsperf(out_text),
        "checker": {"answers_by_rcode": all_rc, "stable_names": len(stable), **cw, "examples": examples},
        "after": after,
        "podns_api_requests": reqs, "relists": relists,
        "during_fault": during,
        "watch_restarts": restarts, "podns_responses": rcodes,
        "readyz_samples": len(ready), "readyz_not_200": not_ready,
        "recovery_s": None if recovery is None else round(recovery, 3),
        "pod_watch_back_after_injection_s": rewatch,
        "checker_nxdomain_by_second_from_injection": nx_by_s,
        "settle_canary_s": None if settle is None else round(settle, 3),
        "loadavg": open("/proc/loadavg").read().split()[:3],
    }
    print(json.dumps(res), file=sys.stderr)
    return res


def main():
    m = pods()
    names_file = out + ".names"
    with open(names_file, "w") as f:
        for fqdn in sorted(m):
            f.write(f"{fqdn} A\n")
    print(f"{len(m)} pod names", file=sys.stderr)
    results = []
    for ph in phases:
        results.append(run_phase(ph, names_file))
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
        time.sleep(2)
    table(results)


# ---------------------------------------------------------------------------
# Recovery with N replicas (issue 13): `faults.sh recovery` runs this once per
# replica count, against one simulator without load or churn.
#
#   python3 faults.py --recovery API_URL N DNS_BASE ADMIN_BASE OUT_JSON [SCENARIOS]
#
# Replica i (0-based) serves DNS on 127.0.0.1:DNS_BASE+i and admin on
# ADMIN_BASE+i. Scenarios (default "resume relist"), each with an outage of
# OUTAGE seconds (env, default 10) via POST /sim/faults/outage:
#   resume  the outage alone: every watch keeps its resourceVersion, so its
#           retries are resumes (podns: 250 ms doubling to 1 s, +50% jitter);
#   relist  POST /sim/faults/compact and /sim/faults/drop-watches first, wait
#           (at most 0.6 s) until every replica has counted its 410
#           restarts, then the outage: each watch now needs a list, and the
#           list is what fails during the outage (podns: client-go's 0.8 s
#           doubling to 30 s, with jitter).
# One second into the outage a Job of JOB_RANKS (default 4) ranks is created
# through POST /sim/jobs (the simulator's own path, not subject to the
# outage); every replica is asked its last rank over UDP every 5 ms. The
# answer time is from the outage's end (the request time + OUTAGE, so at or
# before the simulator's own end: strict). /sim/stats is sampled every
# 100 ms for podns's requests by verb and resource (a request the outage
# refused is verb `fault`), responses and bytes sent.
# ---------------------------------------------------------------------------
OUTAGE = float(os.environ.get("OUTAGE", "10"))
JOB_RANKS = int(os.environ.get("JOB_RANKS", "4"))


def sim_sample():
    st = req("GET", "/sim/stats", timeout=5)
    return {"t": time.time(), "requests": podns_requests(st), "bytes_sent": st["bytes_sent"],
            "watch_bytes_sent": st["watch_bytes_sent"], "open_watches": st["open_watches"]}


def replica_metrics(admin_ports):
    out = []
    for p in admin_ports:
        try:
            m = scrape(f"http://127.0.0.1:{p}/metrics", timeout=5)
        except Exception:
            m = {}
        out.append({k: v for k, v in m.items() if k.startswith("podns_watch_restarts_total")})
    return out


def restarts_diff(a, b):
    """{'reason/retry': n} summed over replicas."""
    d = {}
    for m0, m1 in zip(a, b):
        for k, v in m1.items():
            n = v - m0.get(k, 0)
            if n:
                reason = re.search(r'reason="([^"]*)"', k).group(1)
                retry = re.search(r'retry="([^"]*)"', k).group(1)
                d[f"{reason}/{retry}"] = d.get(f"{reason}/{retry}", 0) + int(n)
    return d


def verb_sum(reqs, verb):
    return sum(n for k, n in reqs.items() if k.split(" ")[0] == verb)


def run_recovery(scenario, n, dns_ports, admin_ports, watches_per_replica=3):
    print(f"[{time.strftime('%T')}] recovery {scenario}, {n} replicas, outage {OUTAGE:.0f} s",
          file=sys.stderr)
    time.sleep(2)
    met0 = replica_metrics(admin_ports)
    samples = [sim_sample()]
    stop = threading.Event()

    def sampler():
        limit = time.time() + OUTAGE + 120
        while not stop.is_set() and time.time() < limit:
            try:
                samples.append(sim_sample())
            except Exception:
                pass
            time.sleep(0.1)

    th = threading.Thread(target=sampler)
    th.start()
    relisting = None
    if scenario == "relist":
        req("POST", "/sim/faults/compact")
        req("POST", "/sim/faults/drop-watches")
        limit = time.time() + 0.6
        while time.time() < limit:
            d = restarts_diff(met0, replica_metrics(admin_ports))
            relisting = sum(v for k, v in d.items() if k.endswith("/relist"))
            if relisting >= watches_per_replica * n:
                break
            time.sleep(0.02)
    s_t0 = sim_sample()
    t0 = time.time()
    req("POST", f"/sim/faults/outage?seconds={OUTAGE:g}")
    t_end = t0 + OUTAGE
    time.sleep(max(0.0, t0 + 1 - time.time()))
    job = f"rec-{scenario}-{n}"
    req("POST", "/sim/jobs", {"namespace": "default", "name": job, "ranks": JOB_RANKS,
                              "kind": "indexed-job"})
    name = f"{job}-{JOB_RANKS - 1}.{job}.default.svc.{ZONE}"
    answered = [None] * n

    def poll(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.05)
        limit = t_end + 60
        while time.time() < limit:
            qid, q = query(name)
            s.sendto(q, ("127.0.0.1", dns_ports[i]))
            try:
                while True:
                    m, _ = s.recvfrom(65535)
                    rid, rcode, _tc, addrs = parse(m)
                    if rid == qid:
                        break
                if rcode == 0 and addrs:
                    answered[i] = time.time()
                    return
            except socket.timeout:
                pass
            time.sleep(0.005)

    pollers = [threading.Thread(target=poll, args=(i,)) for i in range(n)]
    for p in pollers:
        p.start()
    for p in pollers:
        p.join()
    last = max([a for a in answered if a] or [time.time()])
    time.sleep(max(0.0, last + 3 - time.time()))
    stop.set()
    th.join(timeout=10)
    met1 = replica_metrics(admin_ports)
    samples.append(s_t0)
    samples.sort(key=lambda x: x["t"])
    pre = s_t0
    at_end = [x for x in samples if x["t"] <= t_end][-1]
    fin = samples[-1]
    during = diff_requests(pre["requests"], at_end["requests"])
    after = diff_requests(at_end["requests"], fin["requests"])
    # requests per whole second, from the outage's end (negative: during it)
    timeline = {}
    for a, b in zip(samples, samples[1:]):
        sec = int((b["t"] - t_end) // 1)
        for k, v in diff_requests(a["requests"], b["requests"]).items():
            verb = k.split(" ")[0]
            timeline.setdefault(sec, {}).setdefault(verb, 0)
            timeline[sec][verb] += v
    first_ok = None
    for x in samples:
        if x["t"] > t_end and verb_sum(diff_requests(at_end["requests"], x["requests"]), "watch") \
                + verb_sum(diff_requests(at_end["requests"], x["requests"]), "list") > 0:
            first_ok = round(x["t"] - t_end, 2)
            break
    after_s = [None if a is None else round(a - t_end, 3) for a in answered]
    ok = sorted(a for a in after_s if a is not None)
    rec_secs = [s for s in timeline if s >= 0]
    res = {
        "scenario": scenario, "replicas": n, "outage_s": OUTAGE, "job_ranks": JOB_RANKS,
        "watches": watches_per_replica * n,
        "relist_restarts_before_outage": relisting,
        "answered_after_outage_end_s": after_s,
        "answered_min_median_max_s": [ok[0], ok[len(ok) // 2], ok[-1]] if ok else None,
        "unanswered": sum(1 for a in after_s if a is None),
        "first_accepted_request_after_end_s": first_ok,
        "before_outage_requests": diff_requests(samples[0]["requests"], s_t0["requests"]),
        "during_outage_requests": during,
        "refused_per_watch_per_s": round(during.get("fault ", 0) / (watches_per_replica * n) / OUTAGE, 2),
        "after_end_requests": after,
        "after_end_window_s": round(fin["t"] - at_end["t"], 2),
        "after_end_bytes_sent": fin["bytes_sent"] - at_end["bytes_sent"],
        "after_end_watch_bytes_sent": fin["watch_bytes_sent"] - at_end["watch_bytes_sent"],
        "peak_requests_per_s_after_end": max([sum(timeline[s].values()) for s in rec_secs] or [0]),
        "requests_per_s_from_end": {str(k): timeline[k] for k in sorted(timeline)},
        "watch_restarts": restarts_diff(met0, met1),
        "loadavg": open("/proc/loadavg").read().split()[:3],
    }
    print(json.dumps(res), file=sys.stderr)
    return res


def recovery_main():
    n, dns_base, admin_base, out_file = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    scenarios = (sys.argv[7] if len(sys.argv) > 7 else "resume relist").split()
    dns_ports = [dns_base + i for i in range(n)]
    admin_ports = [admin_base + i for i in range(n)]
    results = json.load(open(out_file)) if os.path.exists(out_file) else []
    for sc in scenarios:
        results.append(run_recovery(sc, n, dns_ports, admin_ports))
        with open(out_file, "w") as f:
            json.dump(results, f, indent=1)


def recovery_table(results):
    print("| scenario | replicas (watches) | Job answers after the outage's end: min / median / max"
          " | first list or watch accepted after the end | refused during the outage (per watch per s)"
          " | after the end: list / watch requests | API bytes sent after the end | peak requests/s after the end"
          " | watch restarts (reason/retry) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        a = r["answered_min_median_max_s"]
        ans = " / ".join(f"{x:.2f} s" for x in a) if a else "none"
        if r["unanswered"]:
            ans += f" ({r['unanswered']} never in 60 s)"
        refused = r["during_outage_requests"].get("fault ", 0)
        aft = r["after_end_requests"]
        rs = ", ".join(f"{k} {v}" for k, v in sorted(r["watch_restarts"].items()))
        print(f"| {r['scenario']}, {r['outage_s']:g} s outage | {r['replicas']} ({r['watches']}) | {ans} |"
              f" {r['first_accepted_request_after_end_s']} s | {refused} ({r['refused_per_watch_per_s']}) |"
              f" {verb_sum(aft, 'list')} / {verb_sum(aft, 'watch')} |"
              f" {r['after_end_bytes_sent'] / 1e6:.1f} MB | {r['peak_requests_per_s_after_end']} | {rs} |")


def table(results):
    print("| fault | duration | load | wrong answers during / after catch-up | SERVFAIL | NXDOMAIN for existing names"
          " | relists (list requests + 410 restarts) | podns API requests during the fault | pod watch back"
          " (from injection) | recovery (from fault end) | dnsperf lost (no answer in 1 s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        sf = r["dnsperf"]["rcodes"].get("SERVFAIL", 0)
        nx_all = r["dnsperf"]["rcodes"].get("NXDOMAIN", 0)
        c, a = r["checker"], r["after"]
        dur = r["during_fault"]
        during = "—"
        if dur:
            n = sum(dur["podns_requests"].values())
            during = f"{n} ({dur['responses'].get('429', 0)}×429, {dur['responses'].get('503', 0)}×503)"
        r410 = sum(v for k, v in r["watch_restarts"].items() if "expired_410" in k)
        print(f"| {r['fault']} | {r['duration_s']} s | {r['dnsperf']['qps'] or 0:.0f} q/s,"
              f" {r['pod_mutations'] / r['phase_s']:.0f} pod mutations/s |"
              f" {c['wrong_address']} of {c['checked']} / {a['wrong']} of {a['checked']} |"
              f" {sf + c['servfail'] + a['servfail']} |"
              f" {c['nxdomain'] + a['nxdomain']} (all names, in transition included: {nx_all} of"
              f" {r['dnsperf']['completed'] or 0:.0f}) |"
              f" {r['relists']} + {r410:.0f} | {during} | {r.get('pod_watch_back_after_injection_s', '?')} s |"
              f" {r['recovery_s']} s | {r['dnsperf']['lost'] or 0:.0f} |")

if len(sys.argv) == 3 and sys.argv[1] == "--table":  # python3 faults.py --table faults.json
    table(json.load(open(sys.argv[2])))
elif len(sys.argv) == 3 and sys.argv[1] == "--recovery-table":  # ... --recovery-table faults-recovery.json
    recovery_table(json.load(open(sys.argv[2])))
elif sys.argv[1] == "--recovery":
    recovery_main()
else:
    main()
