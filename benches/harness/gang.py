"""Gang restart: every rank of a job restarted at once; what a polling client sees.

python3 benches/harness/gang.py API_URL DNS_PORT OUT_JSON [JOB] [RANKS]

Reads every rank name's current answer (the old IPs), POSTs
/sim/jobs/default/JOB/restart, then sweeps all RANKS names over UDP on
loopback, again and again, classifying each answer: old IP (stale),
NXDOMAIN/NODATA/timeout (missing), or a new IP. Stops when one whole sweep
answers only new IPs, then sweeps twice more and counts any non-new answer
there as "stale after convergence" (target: 0). Bounded: 120 s.
The sweep is sequential, so convergence time has a resolution of one sweep
(sweep_s in the output).
"""
import json
import sys
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dnsq import Client  # noqa: E402

api, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
job = sys.argv[4] if len(sys.argv) > 4 else "gang"
ranks = int(sys.argv[5]) if len(sys.argv) > 5 else 8192
names = [f"{job}-{i}.{job}.default.svc.cluster.local" for i in range(ranks)]
dns = Client(port, timeout=0.05)


def sweep():
    return [dns.ask(n) for n in names]


old = sweep()
old_ip = [r[1][0] if r and r[0] == 0 and r[1] else None for r in old]
assert all(old_ip), "not every rank answered before the restart"
r = urllib.request.Request(f"{api}/sim/jobs/default/{job}/restart", data=b"{}", method="POST")
r.add_header("content-type", "application/json")
t0 = time.perf_counter()
urllib.request.urlopen(r, timeout=60).read()
t_restart_returned = time.perf_counter() - t0
stale = missing = answers = sweeps = 0
first_new = [None] * ranks
converged = None
sweep_s = []
while time.perf_counter() - t0 < 120:
    s0 = time.perf_counter()
    res = sweep()
    sweeps += 1
    all_new = True
    for i, a in enumerate(res):
        answers += 1
        ip = a[1][0] if a and a[0] == 0 and a[1] else None
        if ip is None:
            missing += 1
            all_new = False
        elif ip == old_ip[i]:
            stale += 1
            all_new = False
        elif first_new[i] is None:
            first_new[i] = time.perf_counter() - t0
    sweep_s.append(time.perf_counter() - s0)
    if all_new:
        converged = time.perf_counter() - t0
        break
after = 0
for _ in range(2):
    for i, a in enumerate(sweep()):
        ip = a[1][0] if a and a[0] == 0 and a[1] else None
        if ip is None or ip == old_ip[i]:
            after += 1
got = [t for t in first_new if t is not None]
result = {
    "ranks": ranks,
    "restart_request_s": round(t_restart_returned, 3),
    "all_new_after_s": round(converged, 3) if converged else None,
    "last_name_first_new_s": round(max(got), 3) if got else None,
    "first_name_first_new_s": round(min(got), 3) if got else None,
    "sweeps": sweeps,
    "sweep_s_median": round(sorted(sweep_s)[len(sweep_s) // 2], 3),
    "answers_during": answers,
    "stale_answers_during": stale,
    "missing_answers_during": missing,
    "stale_or_missing_after_convergence": after,
}
json.dump(result, open(out, "w"), indent=1)
print(json.dumps(result))
