"""The query mix of the DNS benches (run-all.sh, udp-buffers.sh): 200,000
questions, seeded, over JOBS jobs of 1,000 ranks: 90% rank names that
exist, 5% the 64-pod gang's name, 5% rank names that do not exist.

    python3 benches/harness/queries.py OUT JOBS
"""

import random
import sys

random.seed(5)
out = []
for _ in range(200_000):
    r = random.random()
    j = random.randrange(int(sys.argv[2]))
    if r < 0.90:
        i = random.randrange(1000)
        out.append(f"train-{j}-{i}.train-{j}.default.svc.cluster.local A")
    elif r < 0.95:
        out.append("gang64.default.svc.cluster.local A")
    else:
        i = random.randrange(1000, 100000)
        out.append(f"train-{j}-{i}.train-{j}.default.svc.cluster.local A")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
