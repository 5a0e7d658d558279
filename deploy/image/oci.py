#!/usr/bin/env python3
"""A small OCI image writer: files in, one image archive out, no daemon and
no base image. Python's standard library only.

    oci.py build --out FILE --name REF [--name REF…] [config flags] [content flags]
    oci.py inspect FILE          # the archive's names, digest, config and files, as JSON

Content (each DEST is an absolute path in the image; parent directories are
made 0755 root:root):
    --file SRC:DEST[:MODE]       a regular file (MODE in octal; default: SRC's
                                 mode with group and other write bits cleared)
    --cap DEST:CAP[,CAP…]        the file capability of a --file, +ep, as
                                 `setcap CAP=+ep` writes it (the
                                 security.capability extended attribute, in
                                 the layer as a SCHILY.xattr PAX record, as
                                 docker and containerd read it)
    --libs-of DEST               the ELF interpreter and shared libraries a
                                 --file needs at run time (ldd on its SRC),
                                 at their paths on this machine
    --symlink DEST:TARGET
    --dir DEST[:MODE]
    --text DEST:MODE:TEXT        a small file with this content

Config: --entrypoint JSON, --cmd JSON, --user U[:G], --env K=V, --expose
PORT/PROTO, --label K=V, --workdir DIR.

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/)
that also carries docker's manifest.json, so `ctr images import`,
`skopeo copy oci-archive:` / `docker-archive:` and `docker load` all read it.
The image's --name (the first; more are further docker RepoTags) is its
io.containerd.image.name (what ctr import names it) and its tag the
org.opencontainers.image.ref.name (what skopeo's oci-archive: picks).

Reproducible: the same files give the same bytes, so the same digest. Every
entry of the layer and of the archive is sorted by path, owned by 0:0 with
no user or group names, and has one mtime ($SOURCE_DATE_EPOCH, default 0);
the layer is uncompressed (no compressor's version or timestamp in it);
JSON is written with sorted keys; the config has no `created` time.
"""

import argparse
import hashlib
import io
import json
import os
import re
import stat
import struct
import subprocess
import sys
import tarfile

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"

# linux/capability.h
CAPS = {
    "cap_chown": 0, "cap_dac_override": 1, "cap_fowner": 3, "cap_kill": 5,
    "cap_setgid": 6, "cap_setuid": 7, "cap_net_bind_service": 10,
    "cap_net_admin": 12, "cap_net_raw": 13, "cap_sys_admin": 21,
}
VFS_CAP_REVISION_2 = 0x02000000
VFS_CAP_FLAGS_EFFECTIVE = 0x000001


def die(msg):
    print(f"oci.py: {msg}", file=sys.stderr)
    sys.exit(2)


def vfs_cap(names):
    """security.capability as setcap writes `NAMES=+ep` (revision 2, no
    root id): magic_etc, then permitted/inheritable for caps 0-31, 32-63."""
    lo = hi = 0
    for n in names:
        n = n.strip().lower()
        if n not in CAPS:
            die(f"unknown capability {n!r} (known: {', '.join(sorted(CAPS))})")
        bit = CAPS[n]
        if bit < 32:
            lo |= 1 << bit
        else:
            hi |= 1 << (bit - 32)
    return struct.pack("<5I", VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, lo, 0, hi, 0)


def cap_names(raw):
    magic, lo, _inh_lo, hi, _inh_hi = struct.unpack("<5I", raw[:20])
    names = sorted(n for n, b in CAPS.items() if (lo if b < 32 else hi) >> (b % 32) & 1)
    flags = "ep" if magic & VFS_CAP_FLAGS_EFFECTIVE else "p"
    return ",".join(names) + "=+" + flags


def ldd(path):
    """The interpreter and libraries of a dynamic ELF file, as absolute
    paths on this machine (none for a static one)."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    text = out.stdout + out.stderr
    if "not a dynamic executable" in text or "statically linked" in text:
        return []
    if out.returncode != 0:
        die(f"ldd {path}: {text.strip()}")
    libs = []
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"^\S+ => (/\S+) \(0x", line) or re.match(r"^(/\S+) \(0x", line)
        if m:
            libs.append(m.group(1))
        elif "=> not found" in line:
            die(f"{path}: {line}")
    return libs


class Layer:
    def __init__(self, mtime):
        self.mtime = mtime
        self.entries = {}  # dest (no leading /) -> (TarInfo, bytes or None)

    def _info(self, dest, kind, mode):
        ti = tarfile.TarInfo(dest)
        ti.type = kind
        ti.mode = mode
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = self.mtime
        return ti

    def _parents(self, dest):
        parts = dest.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = (self._info(d, tarfile.DIRTYPE, 0o755), None)

    def add_dir(self, dest, mode=0o755):
        dest = dest.strip("/")
        self._parents(dest)
        self.entries[dest] = (self._info(dest, tarfile.DIRTYPE, mode), None)

    def add_bytes(self, dest, data, mode):
        dest = dest.strip("/")
        self._parents(dest)
        ti = self._info(dest, tarfile.REGTYPE, mode)
        ti.size = len(data)
        self.entries[dest] = (ti, data)

    def add_symlink(self, dest, target):
        dest = dest.strip("/")
        self._parents(dest)
        ti = self._info(dest, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self.entries[dest] = (ti, None)

    def set_xattr(self, dest, name, value):
        dest = dest.strip("/")
        if dest not in self.entries or self.entries[dest][0].type != tarfile.REGTYPE:
            die(f"--cap {dest}: no such --file")
        # PAX values are text; these bytes (all < 0x80) are valid UTF-8.
        self.entries[dest][0].pax_headers[f"SCHILY.xattr.{name}"] = value.decode("latin-1")

    def tar(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for dest in sorted(self.entries):
                ti, data = self.entries[dest]
                t.addfile(ti, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def repository(ref):
    """docker.io/library/podns:0.1.0 -> docker.io/library/podns."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > slash else ref


def docker_tag(ref):
    """docker.io/library/podns:0.1.0 -> podns:0.1.0 (what docker load shows)."""
    for prefix in ("docker.io/library/", "docker.io/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def build(args):
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    layer = Layer(mtime)
    files = {}
    for spec in args.dir:
        dest, _, mode = spec.partition(":")
        layer.add_dir(dest, int(mode, 8) if mode else 0o755)
    for spec in args.file:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            die(f"--file {spec}: want SRC:DEST[:MODE]")
        src, dest = parts[0], parts[1]
        if not os.path.isfile(src):
            die(f"--file {spec}: {src} is not a file")
        mode = int(parts[2], 8) if len(parts) == 3 else stat.S_IMODE(os.stat(src).st_mode) & 0o755
        with open(src, "rb") as f:
            layer.add_bytes(dest, f.read(), mode)
        files[dest.strip("/")] = src
    for spec in args.text:
        dest, mode, text = spec.split(":", 2)
        layer.add_bytes(dest, text.encode().decode("unicode_escape").encode(), int(mode, 8))
    for spec in args.symlink:
        dest, target = spec.split(":", 1)
        layer.add_symlink(dest, target)
    for dest in args.libs_of:
        src = files.get(dest.strip("/"))
        if src is None:
            die(f"--libs-of {dest}: no such --file")
        for lib in ldd(src):
            real = os.path.realpath(lib)
            with open(real, "rb") as f:
                data = f.read()
            mode = stat.S_IMODE(os.stat(real).st_mode) & 0o755
            # The loader opens the path ldd printed; a symlink there (the
            # interpreter's /lib64 name) points at the file's own path.
            layer.add_bytes(real, data, mode)
            if os.path.normpath(lib) != real and lib.strip("/") not in layer.entries:
                layer.add_symlink(lib, real)
    for spec in args.cap:
        dest, _, names = spec.partition(":")
        layer.set_xattr(dest, "security.capability", vfs_cap(names.split(",")))

    layer_tar = layer.tar()
    diff_id = sha(layer_tar)
    conf = {}
    if args.user:
        conf["User"] = args.user
    if args.entrypoint:
        conf["Entrypoint"] = json.loads(args.entrypoint)
    if args.cmd:
        conf["Cmd"] = json.loads(args.cmd)
    if args.env:
        conf["Env"] = args.env
    if args.expose:
        conf["ExposedPorts"] = {p: {} for p in args.expose}
    if args.label:
        conf["Labels"] = dict(l.split("=", 1) for l in args.label)
    if args.workdir:
        conf["WorkingDir"] = args.workdir
    config = canonical({
        "architecture": args.arch,
        "os": "linux",
        "config": conf,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "deploy/image/oci.py"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": diff_id, "size": len(layer_tar)}],
    })
    digest = sha(manifest)
    names = args.name[:1]
    index = canonical({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": digest,
                "size": len(manifest),
                "platform": {"architecture": args.arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": n,
                    "org.opencontainers.image.ref.name": n[len(repository(n)) + 1:] or "latest",
                },
            }
            for n in names
        ],
    })
    blob = lambda d: "blobs/sha256/" + d.split(":")[1]
    docker = canonical([{
        "Config": blob(sha(config)),
        "RepoTags": [docker_tag(n) for n in args.name],
        "Layers": [blob(diff_id)],
    }])
    outer = Layer(mtime)
    outer.add_bytes("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}), 0o644)
    outer.add_bytes("index.json", index, 0o644)
    outer.add_bytes("manifest.json", docker, 0o644)
    for data in (config, manifest, layer_tar):
        outer.add_bytes(blob(sha(data)), data, 0o644)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(outer.tar())
    os.replace(tmp, args.out)
    print(digest)


def inspect(args):
    with tarfile.open(args.archive) as t:
        def read(name):
            return t.extractfile(name).read()
        index = json.loads(read("index.json"))
        m = index["manifests"][0]
        manifest = json.loads(read("blobs/sha256/" + m["digest"].split(":")[1]))
        config = json.loads(read("blobs/sha256/" + manifest["config"]["digest"].split(":")[1]))
        files = {}
        for l in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(read("blobs/sha256/" + l["digest"].split(":")[1]))) as lt:
                for ti in lt.getmembers():
                    e = {"type": {tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink"}.get(ti.type, "file"),
                         "mode": oct(ti.mode), "uid": ti.uid, "gid": ti.gid, "mtime": ti.mtime}
                    if ti.type == tarfile.SYMTYPE:
                        e["target"] = ti.linkname
                    if ti.isfile():
                        e["size"] = ti.size
                    cap = ti.pax_headers.get("SCHILY.xattr.security.capability")
                    if cap is not None:
                        e["capability"] = cap_names(cap.encode("latin-1", "surrogateescape"))
                    files["/" + ti.name] = e
        print(json.dumps({
            "digest": m["digest"],
            "names": [x["annotations"].get("io.containerd.image.name") for x in index["manifests"]],
            "docker": json.loads(read("manifest.json")),
            "config": config,
            "files": files,
        }, indent=1, sort_keys=True))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--name", action="append", required=True)
    b.add_argument("--arch", default="amd64")
    for flag in ("file", "cap", "libs-of", "symlink", "dir", "text", "env", "expose", "label"):
        b.add_argument("--" + flag, action="append", default=[])
    for flag in ("entrypoint", "cmd", "user", "workdir"):
        b.add_argument("--" + flag)
    i = sub.add_parser("inspect")
    i.add_argument("archive")
    args = p.parse_args()
    build(args) if args.action == "build" else inspect(args)


if __name__ == "__main__":
    main()
