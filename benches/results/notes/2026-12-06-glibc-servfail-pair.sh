set -e
ip link set lo up
ip addr add 127.0.0.2/8 dev lo 2>/dev/null || true
printf 'nameserver 127.0.0.1\nnameserver 127.0.0.2\noptions ndots:5 timeout:1 attempts:2\n' > /tmp/resolv.conf.pair
mount --bind /tmp/resolv.conf.pair /etc/resolv.conf
printf 'hosts: files dns\n' > /tmp/nsswitch.pair; mount --bind /tmp/nsswitch.pair /etc/nsswitch.conf
python3 "$(dirname "$0")"/2026-12-06-glibc-servfail-pair.py
