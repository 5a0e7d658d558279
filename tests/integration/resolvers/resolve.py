"""c-ares (through pycares) for tests/integration/resolvers.rs: one lookup,
as a program built on c-ares (gevent, aiodns, ...) makes it, timed.

    resolve.py addrs|addrs4 NAME   ares_getaddrinfo (search list, ndots)
    resolve.py ptr IP              ares_gethostbyaddr
    resolve.py srv NAME            ares_search for SRV

Prints one line: "ok MS ITEM..." (items sorted and unique: addresses,
names without the trailing dot, PORT:TARGET), or "fail MS WHY".

    resolve.py --version           "pycares X.Y.Z API 4|5", or exit 1

Speaks both pycares APIs, told apart by what the module has, not by its
version string: pycares 4 (Debian's python3-pycares 4.3) takes the
callback as a positional argument, leaves the event loop to the caller
(Channel.getsock/process_fd) and gives SRV answers as a list of
(host, port); pycares 5 takes callback= as a keyword only, runs c-ares's
own event thread (Channel.wait) and gives a DNSResult whose answer
records carry SRVRecordData (target, port).
"""

import select
import socket
import sys
import time

import pycares


# pycares 5 dropped Channel.getsock: c-ares's event thread runs the
# sockets, and Channel.wait blocks until every query has called back.
EVENT_THREAD = not hasattr(pycares.Channel, "getsock")
API = 5 if EVENT_THREAD else 4


def run(channel):
    """Until every query has called back."""
    if EVENT_THREAD:
        channel.wait()
        return
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


def text(s):
    """pycares gives addresses as bytes (4 and 5), names as str."""
    return s.decode() if isinstance(s, bytes) else s


def srv_items(result):
    """PORT:TARGET of each SRV record: pycares 4 gives a list of SRV
    results, pycares 5 a DNSResult whose answer holds every record."""
    if hasattr(result, "answer"):
        return [
            "%d:%s" % (r.data.port, text(r.data.target))
            for r in result.answer
            if r.type == pycares.QUERY_TYPE_SRV
        ]
    return ["%d:%s" % (r.port, text(r.host)) for r in result]


def main():
    if sys.argv[1:] == ["--version"]:
        print("pycares %s API %d" % (pycares.__version__, API))
        return
    if len(sys.argv) != 3:
        print("usage: resolve.py addrs|addrs4|ptr|srv NAME | --version", file=sys.stderr)
        sys.exit(64)
    op, name = sys.argv[1], sys.argv[2]
    channel = pycares.Channel()
    items, errors = [], []

    def done(result, error):
        # pycares 5 calls back on its event thread; the lists are only
        # read once Channel.wait has returned.
        if error:
            errors.append(text(pycares.errno.strerror(error)))
            return
        if op in ("addrs", "addrs4"):
            items.extend(text(n.addr[0]) for n in result.nodes)
        elif op == "ptr":
            items.append(text(result.name))
        else:
            items.extend(srv_items(result))

    start = time.monotonic()
    # callback= by keyword: pycares 5 takes it no other way, and pycares
    # 4's parameter of that name takes it so too.
    if op in ("addrs", "addrs4"):
        family = socket.AF_INET if op == "addrs4" else socket.AF_UNSPEC
        channel.getaddrinfo(name, None, family=family, type=socket.SOCK_STREAM, callback=done)
    elif op == "ptr":
        channel.gethostbyaddr(name, callback=done)
    elif op == "srv":
        channel.search(name, pycares.QUERY_TYPE_SRV, callback=done)
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
