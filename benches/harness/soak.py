"""Soak sampler (issue 7), driven by benches/harness/soak.sh.

python3 benches/harness/soak.py DNS_PORT ADMIN_PORT PODNS_PID DURATION_S INTERVAL_S NAMES_FILE OUT_PREFIX

While soak.sh's dnsperf and /sim/churn run, every INTERVAL_S seconds:
  * podns's RSS (VmRSS) and open fds (entries of /proc/PID/fd);
  * responses by rcode and the server-side answer-time histogram
    (podns_dns_request_duration_seconds) from /metrics, as deltas: p50/p99
    are the upper bounds of the buckets they fall in;
  * a probe client asking 200 names/s over UDP and timing each round trip:
    p50/p99/p99.9 per interval (client-side, includes the kernel and Python).
At the end: least-squares slopes of RSS (MiB per hour) and fds (per hour)
over all samples and over the samples after the first 10 % (warm-up).
Writes OUT_PREFIX.csv (one row per interval) and OUT_PREFIX.json (summary).
Loopback only; bounded by DURATION_S.
"""
import csv
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnsq import parse, query  # noqa: E402
from promtext import bucket_bound, scrape  # noqa: E402

port, admin, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
duration, interval = float(sys.argv[4]), float(sys.argv[5])
names = [line.split()[0] for line in open(sys.argv[6]) if line.strip()]
out = sys.argv[7]


def rss_fds():
    rss = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def metrics():
    return scrape(f"http://127.0.0.1:{admin}/metrics", timeout=5)


def hist_pct(m0, m1, q):
    """Upper bound of the answer-time bucket holding quantile q between m0 and m1."""
    return bucket_bound(m0, m1, "podns_dns_request_duration_seconds", q)[0]


def pct(v, q):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


rtts, lost = [], [0]
lock = threading.Lock()
stop = threading.Event()


def probe():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    nxt = time.perf_counter()
    while not stop.is_set():
        qid, q = query(random.choice(names))
        t0 = time.perf_counter()
        s.sendto(q, ("127.0.0.1", port))
        try:
            while True:
                m, _ = s.recvfrom(65535)
                if parse(m)[0] == qid:
                    break
            with lock:
                rtts.append(time.perf_counter() - t0)
        except socket.timeout:
            with lock:
                lost[0] += 1
        nxt += 0.005
        d = nxt - time.perf_counter()
        if d > 0:
            time.sleep(d)


def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


th = threading.Thread(target=probe)
th.start()
rows = []
t0 = time.time()
m_prev = metrics()
next_at = t0 + interval
try:
    while time.time() - t0 < duration:
        time.sleep(max(0.0, next_at - time.time()))
        next_at += interval
        rss, fds = rss_fds()
        m = metrics()
        with lock:
            r, lo = list(rtts), lost[0]
            rtts.clear()
            lost[0] = 0
        d = {k: m[k] - m_prev.get(k, 0) for k in m if k.startswith("podns_dns_responses_total")}
        row = {
            "t_s": round(time.time() - t0, 1), "rss_kb": rss, "fds": fds,
            "responses": int(sum(d.values())),
            "servfail": int(sum(v for k, v in d.items() if "SERVFAIL" in k.upper())),
            "server_p50_le_s": hist_pct(m_prev, m, 0.5), "server_p99_le_s": hist_pct(m_prev, m, 0.99),
            "probe_n": len(r), "probe_lost": lo,
            "probe_p50_ms": round(pct(r, 0.5) * 1e3, 3) if r else None,
            "probe_p99_ms": round(pct(r, 0.99) * 1e3, 3) if r else None,
            "probe_p999_ms": round(pct(r, 0.999) * 1e3, 3) if r else None,
            "loadavg": open("/proc/loadavg").read().split()[0],
        }
        m_prev = m
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
finally:
    stop.set()
    th.join(timeout=5)

with open(out + ".csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
ts = [r["t_s"] / 3600 for r in rows]
rss = [r["rss_kb"] / 1024 for r in rows]
fds = [r["fds"] for r in rows]
k = max(1, len(rows) // 10)
summary = {
    "duration_s": duration, "interval_s": interval, "samples": len(rows),
    "rss_mib_first": rss[0], "rss_mib_last": rss[-1], "rss_mib_max": max(rss),
    "rss_slope_mib_per_hour": round(slope(ts, rss), 3),
    "rss_slope_mib_per_hour_after_warmup": round(slope(ts[k:], rss[k:]), 3),
    "fds_first": fds[0], "fds_last": fds[-1], "fds_max": max(fds),
    "fds_slope_per_hour": round(slope(ts, fds), 3),
    "fds_slope_per_hour_after_warmup": round(slope(ts[k:], fds[k:]), 3),
    "probe_p50_ms_median": pct([r["probe_p50_ms"] for r in rows if r["probe_p50_ms"] is not None], 0.5),
    "probe_p99_ms_median": pct([r["probe_p99_ms"] for r in rows if r["probe_p99_ms"] is not None], 0.5),
    "probe_p99_ms_max": max((r["probe_p99_ms"] for r in rows if r["probe_p99_ms"] is not None), default=None),
    "probe_lost": sum(r["probe_lost"] for r in rows),
    "servfail": sum(r["servfail"] for r in rows),
    "responses": sum(r["responses"] for r in rows),
}
json.dump(summary, open(out + ".json", "w"), indent=1)
print(json.dumps(summary))
