"""Markdown tables from a vs_coredns.py CSV (rss and qps stages in rounds).

    python3 benches/harness/vs_coredns_table.py benches/harness/results/vs-coredns-COMMIT.csv

Prints, per size, one row per server and round (RSS, ready, QPS, CPU-ms per
1,000 answers, the 1-minute load when measured), then the headline: the
median over rounds with min-max, and each figure against podns.
"""
import csv
import re
import sys
from collections import defaultdict


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt(x):
    return f"{x / 1000:.1f}k" if x >= 10000 else f"{x:.3g}"


def main(path):
    rounds = defaultdict(dict)  # (size, server, round) -> {metric: (value, load)}
    best = {}
    for r in csv.DictReader(open(path)):
        note = dict(kv.split("=", 1) for kv in r["note"].split() if "=" in kv)
        if r["stage"] == "summary" and r["metric"].endswith("-best-coredns"):
            best[r["metric"].split("-")[0]] = r["server"]
        if r["stage"] not in ("rss", "qps") or "round" not in note:
            continue
        m = re.match(r"(?:rss-)?(\d+)-?(.*)", r["metric"])
        size, metric = m.group(1), (m.group(2) or "rss-MiB").replace("-MiB", "") or "rss"
        if r["metric"].startswith("rss-"):
            metric = "rss"
            rounds[(size, r["server"], note["round"])]["ready"] = (float(note["ready_s"]), None)
        rounds[(size, r["server"], note["round"])][metric] = (float(r["value"]), note.get("load1"), note.get("lost"))
    sizes = sorted({k[0] for k in rounds}, key=int)
    cols = [("rss", "RSS MiB"), ("ready", "ready s")]
    fixed = sorted({m for v in rounds.values() for m in v if m.startswith("fixed-") and m.endswith("-qps")})
    for f in fixed:
        cols += [(f.replace("-qps", "-cpu-ms-per-1k"), f"CPU-ms/1k at {f.split('-')[1]}/s")]
    cols += [("max-qps", "max QPS"), ("max-cpu-ms-per-1k", "CPU-ms/1k at max")]
    for size in sizes:
        servers = list(dict.fromkeys(k[1] for k in rounds if k[0] == size))
        print(f"\n### {int(size):,} pods: per round\n")
        print("| round | server | " + " | ".join(c[1] for c in cols) + " | load1 | lost (max) |")
        print("|---" * (len(cols) + 4) + "|")
        for rnd in sorted({k[2] for k in rounds if k[0] == size}, key=int):
            for s in servers:
                v = rounds.get((size, s, rnd), {})
                cells = [f"{v[c][0]:g}" if c in v else "" for c, _ in cols]
                load = v.get("max-qps", (0, ""))[1] or ""
                lost = v.get("max-qps", (0, "", ""))[2] or ""
                print(f"| {rnd} | {s} | " + " | ".join(cells) + f" | {load} | {lost} |")
        print(f"\n### {int(size):,} pods: median over rounds (min-max); best CoreDNS by median max QPS: {best.get(size, '?')}\n")
        print("| server | " + " | ".join(c[1] for c in cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        med = {}
        for s in servers:
            cells = []
            for c, _ in cols:
                xs = [rounds[(size, s, r)][c][0] for r in {k[2] for k in rounds if k[0] == size}
                      if c in rounds.get((size, s, r), {})]
                if not xs:
                    cells.append("")
                    continue
                med[(s, c)] = median(xs)
                cells.append(f"{fmt(median(xs))} ({fmt(min(xs))}-{fmt(max(xs))})")
            name = f"**{s}** (best)" if s == best.get(size) else s
            print(f"| {name} | " + " | ".join(cells) + " |")
        print("\nRatios of medians, podns against each CoreDNS (QPS: podns/CoreDNS; RSS and CPU: CoreDNS/podns):\n")
        print("| CoreDNS | " + " | ".join(c[1] for c in cols if c[0] != "ready") + " |")
        print("|---" * len(cols) + "|")
        for s in servers:
            if s == "podns":
                continue
            cells = []
            for c, _ in cols:
                if c == "ready":
                    continue
                a, b = med.get(("podns", c)), med.get((s, c))
                if not a or not b:
                    cells.append("")
                elif c == "max-qps":
                    cells.append(f"{a / b:.2f}x")
                else:
                    cells.append(f"{b / a:.2f}x")
            print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
