# Two fake nameservers: 127.0.0.1 answers AAAA NODATA at once and A with
# SERVFAIL after 700 ms (a node instance whose forward timed out);
# 127.0.0.2 answers A 10.0.0.1 and AAAA NODATA (CoreDNS). Then getaddrinfo.
import socket, struct, threading, time, sys, os
def parse(q):
    i = 12; labels = []
    while q[i]:
        l = q[i]; labels.append(q[i+1:i+1+l]); i += 1 + l
    qtype = struct.unpack(">H", q[i+1:i+3])[0]
    return i + 5, qtype
def reply(q, rcode, a=None):
    end, qtype = parse(q)
    flags = 0x8180 | rcode
    an = 1 if (a and qtype == 1) else 0
    hdr = q[:2] + struct.pack(">HHHHH", flags, 1, an, 0, 0)
    body = q[12:end]
    if an:
        body += b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(a)
    return hdr + body
log = []
def serve(addr, mode):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((addr, 53))
    while True:
        q, src = s.recvfrom(512)
        _, qtype = parse(q)
        log.append((round(time.time()-t0,3), addr, qtype))
        if mode == "node":
            if qtype == 1:
                threading.Timer(0.7, lambda q=q, src=src: s.sendto(reply(q, 2), src)).start()
            else:
                s.sendto(reply(q, 0), src)
        else:
            s.sendto(reply(q, 0, "10.0.0.1"), src)
t0 = time.time()
for a, m in [("127.0.0.1", "node"), ("127.0.0.2", "coredns")]:
    threading.Thread(target=serve, args=(a, m), daemon=True).start()
time.sleep(0.2)
t0 = time.time()
try:
    r = socket.getaddrinfo("trainer.train.svc.cluster.local.", None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    print("ok", [x[4][0] for x in r], round(time.time()-t0, 3))
except socket.gaierror as e:
    print("gaierror", e, round(time.time()-t0, 3))
print(log)
