"""c-ares (through pycares) for tests/integration/resolvers.rs: one lookup,
as a program built on c-ares (gevent, aiodns, ...) makes it, timed.

    resolve.py addrs|addrs4 NAME   ares_getaddrinfo (search list, ndots)
    resolve.py ptr IP              ares_gethostbyaddr
    resolve.py srv NAME            ares_search for SRV

Prints one line: "ok MS ITEM..." (items sorted and unique: addresses,
names without the trailing dot, PORT:TARGET), or "fail MS WHY".
"""

import select
import socket
import sys
import time

import pycares


def run(channel):
    while True:
        reads, writes = channel.getsock()
        if not reads and not writes:
            return
        timeout = channel.timeout()
        r, w, _ = select.select(reads, writes, [], timeout if timeout else 1.0)
        for fd in r:
            channel.process_fd(fd, pycares.ARES_SOCKET_BAD)
        for fd in w:
            channel.process_fd(pycares.ARES_SOCKET_BAD, fd)
        if not r and not w:
            channel.process_fd(pycares.ARES_SOCKET_BAD, pycares.ARES_SOCKET_BAD)


def main():
    if len(sys.argv) != 3:
        print("usage: resolve.py addrs|addrs4|ptr|srv NAME", file=sys.stderr)
        sys.exit(64)
    op, name = sys.argv[1], sys.argv[2]
    channel = pycares.Channel()
    items, errors = [], []

    def done(result, error):
        if error:
            errors.append(pycares.errno.strerror(error))
            return
        if op in ("addrs", "addrs4"):
            # pycares gives the address as bytes.
            items.extend(n.addr[0].decode() for n in result.nodes)
        elif op == "ptr":
            items.append(result.name)
        else:
            items.extend("%d:%s" % (r.port, r.host) for r in result)

    start = time.monotonic()
    if op in ("addrs", "addrs4"):
        family = socket.AF_INET if op == "addrs4" else socket.AF_UNSPEC
        channel.getaddrinfo(name, None, done, family=family, type=socket.SOCK_STREAM)
    elif op == "ptr":
        channel.gethostbyaddr(name, done)
    elif op == "srv":
        channel.search(name, pycares.QUERY_TYPE_SRV, done)
    else:
        print("unknown op", op, file=sys.stderr)
        sys.exit(64)
    run(channel)
    ms = round((time.monotonic() - start) * 1000)
    if errors or not items:
        print("fail %d %s" % (ms, errors[0] if errors else "no records"))
        return
    out = sorted({i.rstrip(".") for i in items})
    print("ok %d %s" % (ms, " ".join(out)))


main()
