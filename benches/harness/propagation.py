"""Propagation: pod IP status write in the simulator -> correct answer from podns.

python3 benches/harness/propagation.py API_URL DNS_PORT OUT_CSV [SAMPLES] [RATES] [ADMIN_URL]

For each background churn rate (pod mutations/s, default 0,100,1000): start
/sim/churn (the simulator's rate is pod replacements/s, about 3.96 mutations
each, so rate = mutations / 3.96), then for SAMPLES probe pods: merge-PATCH
status.podIP/podIPs to a fresh address (10.14.x.y, outside what the
simulator hands out) and poll podns over UDP on loopback until the pod's
hostname name answers that address. Records the time from sending the PATCH
and from its response. Bounded: 2 s per sample, SAMPLES per rate.
Probe pods come from the job `probe` (namespace default) that run-all.sh
creates; samples whose pod churn replaced meanwhile count as `lost`.

With ADMIN_URL (podns's admin address, e.g. http://127.0.0.1:19153), it also
reads podns's own histogram podns_propagation_seconds (watch event decoded
-> answerable in the index, every event, churn included) before and after
each rate, and prints the p50/p99 bucket bounds of the difference: that is
the part of the end-to-end time spent inside podns after decoding. It goes
into the `polls` note of the rate's summary row (sample -1).

Polling: one UDP query at a time, POLL_GAP_US (env, default 0) microseconds
apart, so the poller's load on podns can be varied and seen.
"""
import csv
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dnsq import Client  # noqa: E402
from promtext import bucket_bound, scrape  # noqa: E402

api, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
samples = int(sys.argv[4]) if len(sys.argv) > 4 else 300
rates = [float(r) for r in (sys.argv[5] if len(sys.argv) > 5 else "0,100,1000").split(",")]
admin = sys.argv[6] if len(sys.argv) > 6 else None
poll_gap = int(os.environ.get("POLL_GAP_US", "0")) / 1e6


def req(method, path, body=None, ctype="application/json"):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(api + path, data=data, method=method)
    if data is not None:
        r.add_header("content-type", ctype)
    with urllib.request.urlopen(r, timeout=10) as f:
        return json.loads(f.read() or b"null")


def histogram():
    """podns's metrics, for podns_propagation_seconds, or None without ADMIN_URL."""
    return scrape(admin + "/metrics") if admin else None


pods = req("GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dprobe")["items"]
probes = [(p["metadata"]["name"], p["spec"]["hostname"], p["spec"]["subdomain"]) for p in pods]
probes.sort()
print(f"propagation: {len(probes)} probe pods", file=sys.stderr)
dns = Client(port, timeout=0.05)
n = 0
rows = []
for rate in rates:
    m0 = req("GET", "/sim/stats")["pod_mutations"]
    if rate > 0:
        req("POST", "/sim/churn", {"rate": rate / 3.96, "seconds": 12})
        time.sleep(1.0)
    h0 = histogram()
    t_start = time.time()
    lost = 0
    for k in range(samples):
        if time.time() - t_start > 10:
            break
        name, host, sub = probes[k % len(probes)]
        n += 1
        ip = f"10.14.{(n >> 8) & 255}.{n & 255}"
        qname = f"{host}.{sub}.default.svc.cluster.local"
        body = {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}
        t0 = time.perf_counter()
        try:
            req("PATCH", f"/api/v1/namespaces/default/pods/{name}/status", body,
                "application/merge-patch+json")
        except Exception as e:  # replaced by churn meanwhile
            print(f"patch {name}: {e}", file=sys.stderr)
            lost += 1
            continue
        t1 = time.perf_counter()
        ok = False
        polls = 0
        while time.perf_counter() - t0 < 2.0:
            polls += 1
            r = dns.ask(qname)
            if r and r[0] == 0 and r[1] == [ip]:
                ok = True
                break
            if poll_gap:
                time.sleep(poll_gap)
        t2 = time.perf_counter()
        if not ok:
            lost += 1
            continue
        rows.append({"churn_mutations_per_s": rate, "sample": k,
                     "from_patch_send_ms": round((t2 - t0) * 1e3, 3),
                     "from_patch_response_ms": round((t2 - t1) * 1e3, 3),
                     "patch_rtt_ms": round((t1 - t0) * 1e3, 3), "polls": polls})
        time.sleep(0.01)
    h1 = histogram()
    inner = ""
    if h0 is not None and h1:
        p50, total = bucket_bound(h0, h1, "podns_propagation_seconds", 0.50)
        p99, _ = bucket_bound(h0, h1, "podns_propagation_seconds", 0.99)
        if p50 is not None:
            inner = (f";podns_events={total};podns_p50_le_ms={p50 * 1e3:g}"
                     f";podns_p99_le_ms={p99 * 1e3:g}")
            print(f"rate {rate}: podns event->answerable over {total} events: "
                  f"p50 <= {p50 * 1e3:g} ms, p99 <= {p99 * 1e3:g} ms", file=sys.stderr)
    elapsed = time.time() - t_start + (1.0 if rate > 0 else 0)
    m1 = req("GET", "/sim/stats")["pod_mutations"]
    print(f"rate {rate}: lost {lost}, measured background "
          f"{(m1 - m0) / elapsed:.0f} mutations/s (incl. probes)", file=sys.stderr)
    rows.append({"churn_mutations_per_s": rate, "sample": -1, "from_patch_send_ms": "",
                 "from_patch_response_ms": "", "patch_rtt_ms": "",
                 "polls": f"lost={lost};measured_mut_per_s={(m1 - m0) / elapsed:.0f}{inner}"})
    if rate > 0:
        time.sleep(max(0.0, 12 - (time.time() - t_start)))  # let this churn window end

with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
