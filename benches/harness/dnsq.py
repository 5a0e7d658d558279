"""Minimal DNS-over-UDP client for the whole-process benchmarks (stdlib only).

Used by benches/harness/run-all.sh to wait until a server answers and by
benches/harness/propagation.py. Loopback only: the address is always 127.0.0.1.
"""
import random
import socket
import struct


def query(name, qtype=1):
    qid = random.randint(0, 65535)
    q = struct.pack(">HHHHHH", qid, 0, 1, 0, 0, 1)  # RD=0, one question, EDNS
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", qtype, 1)
    q += b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0)  # OPT, 1232 bytes
    return qid, q


def _skip_name(m, i):
    while True:
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += n + 1


def parse(m):
    """(id, rcode, tc, [A addresses as dotted strings])."""
    qid, flags, qd, an = struct.unpack(">HHHH", m[:8])
    i = 12
    for _ in range(qd):
        i = _skip_name(m, i) + 4
    addrs = []
    for _ in range(an):
        i = _skip_name(m, i)
        t, _c, _ttl, ln = struct.unpack(">HHIH", m[i : i + 10])
        i += 10
        if t == 1 and ln == 4:
            addrs.append(socket.inet_ntoa(m[i : i + 4]))
        i += ln
    return qid, flags & 0xF, bool(flags & 0x200), addrs


class Client:
    def __init__(self, port, timeout=0.2):
        self.addr = ("127.0.0.1", port)
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.settimeout(timeout)

    def ask(self, name, qtype=1):
        """(rcode, addrs) or None on timeout."""
        qid, q = query(name, qtype)
        self.s.sendto(q, self.addr)
        try:
            while True:
                m, _ = self.s.recvfrom(65535)
                rid, rcode, _tc, addrs = parse(m)
                if rid == qid:
                    return rcode, addrs
        except socket.timeout:
            return None


if __name__ == "__main__":
    # python3 dnsq.py PORT NAME [TIMEOUT_S]: exit 0 once NAME answers NOERROR with an A.
    import sys
    import time

    port, name = int(sys.argv[1]), sys.argv[2]
    deadline = time.time() + float(sys.argv[3] if len(sys.argv) > 3 else 60)
    c = Client(port)
    while time.time() < deadline:
        r = c.ask(name)
        if r and r[0] == 0 and r[1]:
            sys.exit(0)
        time.sleep(0.1)
    sys.exit(1)
