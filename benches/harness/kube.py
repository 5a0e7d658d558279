"""The API server of a `tests/cluster/up.sh` cluster, as its admin: what the
harness's scripts share (vs_coredns.py, chaos.py) to read the cluster's
`env` file and make requests with up.sh's client certificate."""

import json
import os
import ssl
import urllib.request


def load_env(d):
    """The KEY=VALUE lines of the cluster directory's `env` file."""
    env = {}
    for line in open(os.path.join(d, "env")):
        if "=" in line and not line.startswith("export"):
            k, v = line.strip().split("=", 1)
            env[k] = v
    return env


class Kube:
    """The API server as cluster admin (up.sh's client certificate); every
    request has a timeout (`TIMEOUT` seconds unless given), so a stopped
    API server blocks nobody."""

    TIMEOUT = 30

    def __init__(self, cluster):
        env = load_env(cluster)
        self.url = env["APISERVER_URL"]
        pki = os.path.join(cluster, "pki")
        self.ctx = ssl.create_default_context(cafile=env["CLUSTER_CA"])
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))

    def req(self, method, path, body=None, ctype="application/json", timeout=None):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            r.add_header("content-type", ctype)
        with urllib.request.urlopen(r, context=self.ctx, timeout=timeout or self.TIMEOUT) as f:
            raw = f.read()
            return json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()

    def try_req(self, *a, **k):
        """`req`, with the exception returned instead of raised (the API
        server may be down: the caller reports it and goes on)."""
        try:
            return self.req(*a, **k)
        except Exception as e:  # noqa: BLE001
            return e
