"""podns's /metrics (Prometheus text) for the bench scripts: one scraper
and one histogram quantile, shared by faults.py, soak.py and propagation.py."""

import urllib.request


def scrape(url, timeout=10):
    """{series: value} of every sample at url, e.g. http://127.0.0.1:19153/metrics."""
    with urllib.request.urlopen(url, timeout=timeout) as f:
        return parse(f.read().decode())


def parse(text):
    """{series: value} of every sample in Prometheus text."""
    m = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                m[k] = float(v)
            except ValueError:
                pass
    return m


def bucket_bound(m0, m1, name, q):
    """(upper bound of the bucket of histogram `name` holding quantile q of
    the observations made between scrapes m0 and m1, their count);
    (None, 0) when there were none."""
    pre = name + '_bucket{le="'
    buckets = sorted((float(k[len(pre):-2]), v - m0.get(k, 0))
                     for k, v in m1.items() if k.startswith(pre))
    if not buckets or buckets[-1][1] <= 0:
        return None, 0
    total = buckets[-1][1]
    for le, n in buckets:
        if n >= q * total:
            return le, int(total)
    return buckets[-1][0], int(total)
