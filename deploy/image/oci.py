#!/usr/bin/env python3
"""A small OCI image writer: files in, one image archive out, no daemon and
no base image. Python's standard library only.

    oci.py build --out FILE --name REF [--name REF…] [--platform OS/ARCH]
                 [--sysroot DIR] [config flags] [content flags]
    oci.py index --out FILE --name REF [--name REF…] ARCHIVE…
    oci.py inspect FILE [--platform OS/ARCH]   # names, digests, config and
                                               # files, as JSON
    oci.py unpack FILE --platform OS/ARCH DIR  # that image's files into DIR
                                               # (e.g. for qemu-user -L DIR)

`build` writes one image for one platform (default: this machine's,
linux/amd64 or linux/arm64). `index` puts the images of several `build`
archives, one per platform, under one OCI image index in one archive:
what a runtime on any of those platforms pulls or imports by one name.

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
                                 --file needs at run time: for this
                                 machine's platform, what ldd on its SRC
                                 names, at their paths here; with
                                 --sysroot DIR (another platform's, e.g.
                                 Debian's cross libc /usr/aarch64-linux-gnu),
                                 its PT_INTERP and DT_NEEDED found in
                                 DIR/lib, put in /usr/lib/TRIPLE as that
                                 platform's Debian has them, the
                                 interpreter also at its PT_INTERP path
    --symlink DEST:TARGET
    --dir DEST[:MODE]
    --text DEST:MODE:TEXT        a small file with this content

Config: --entrypoint JSON, --cmd JSON, --user U[:G], --env K=V, --expose
PORT/PROTO, --label K=V, --workdir DIR.

Every ELF file put in an image must be of the image's platform (its
e_machine), so an image never says amd64 while it holds arm64 code.

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/)
that also carries docker's manifest.json, so `ctr images import`,
`skopeo copy oci-archive:` / `docker-archive:` and `docker load` all read it.
The archive's --name (the first; more are further docker RepoTags) is the
io.containerd.image.name (what ctr import names it) and its tag the
org.opencontainers.image.ref.name (what skopeo's oci-archive: picks) of
index.json's one entry: the image's manifest (`build`) or the image index
(`index`), whose digest is the one to pin. An index archive's manifest.json
names the image of this machine's platform (or the first), as docker's
classic store loads one platform only.

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
# Platforms: ELF e_machine, and where Debian keeps the libraries.
PLATFORMS = {
    "linux/amd64": {"machine": 62, "triple": "x86_64-linux-gnu"},
    "linux/arm64": {"machine": 183, "triple": "aarch64-linux-gnu"},
}
UNAME = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
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


def host_platform():
    return UNAME.get(os.uname().machine, "linux/" + os.uname().machine)


def elf(data):
    """(e_machine, PT_INTERP or None, [DT_NEEDED]) of a 64-bit ELF file's
    bytes, or None when it is not ELF."""
    if data[:4] != b"\x7fELF":
        return None
    if data[4] != 2:
        die("only 64-bit ELF files are supported")
    e = "<" if data[5] == 1 else ">"
    machine = struct.unpack_from(e + "H", data, 18)[0]
    phoff = struct.unpack_from(e + "Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from(e + "HH", data, 54)
    interp, dynamic, loads = None, None, []
    for i in range(phnum):
        p_type, _flags, off, vaddr, _paddr, filesz = struct.unpack_from(e + "IIQQQQ", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            interp = data[off:off + filesz].rstrip(b"\0").decode()
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (off, filesz)
        elif p_type == 1:  # PT_LOAD
            loads.append((vaddr, off, filesz))
    needed, strtab = [], None
    if dynamic:
        for j in range(dynamic[1] // 16):
            tag, val = struct.unpack_from(e + "qQ", data, dynamic[0] + 16 * j)
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                needed.append(val)
            elif tag == 5:  # DT_STRTAB (an address)
                strtab = val
    names = []
    if needed:
        base = next((o + strtab - v for v, o, n in loads if v <= strtab < v + n), None)
        if base is None:
            die("an ELF file whose string table is in no loaded segment")
        for n in needed:
            end = data.index(b"\0", base + n)
            names.append(data[base + n:end].decode())
    return machine, interp, names


def cross_libs(src, sysroot, triple):
    """[(path in the image, file on this machine, symlink target or None)]
    for what SRC loads at run time, from SYSROOT/lib: its interpreter and
    every DT_NEEDED, transitively."""
    libdir = "/usr/lib/" + triple
    with open(src, "rb") as f:
        _, interp, needed = elf(f.read())
    out = []
    if interp:
        name = os.path.basename(interp)
        out.append((f"{libdir}/{name}", os.path.join(sysroot, "lib", name), None))
        if interp != f"{libdir}/{name}":
            # Relative, as Debian's: it resolves inside the image however
            # the image's root is reached (a container, or qemu-user -L).
            out.append((interp, None, os.path.relpath(f"{libdir}/{name}", os.path.dirname(interp))))
    seen, todo = set(), list(needed)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        path = os.path.join(sysroot, "lib", name)
        if not os.path.isfile(path):
            die(f"{src} needs {name}, which {sysroot}/lib lacks")
        out.append((f"{libdir}/{name}", path, None))
        with open(os.path.realpath(path), "rb") as f:
            todo += elf(f.read())[2]
    return out


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


def platform_of(spec):
    if spec not in PLATFORMS:
        die(f"--platform {spec}: known are {', '.join(PLATFORMS)}")
    return spec


def check_machine(path, data, platform):
    """An ELF file must be of the image's platform."""
    e = elf(data)
    if e is not None and e[0] != PLATFORMS[platform]["machine"]:
        arch = {v["machine"]: k for k, v in PLATFORMS.items()}.get(e[0], f"e_machine {e[0]}")
        die(f"{path} is built for {arch}, not for the image's {platform}")


def build(args):
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    platform = platform_of(args.platform or host_platform())
    if args.sysroot is None and platform != host_platform() and args.libs_of:
        die(f"--libs-of for {platform} on a {host_platform()} machine needs --sysroot")
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
            data = f.read()
        check_machine(src, data, platform)
        layer.add_bytes(dest, data, mode)
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
        if args.sysroot is not None:
            for path, real, target in cross_libs(src, args.sysroot, PLATFORMS[platform]["triple"]):
                if target is not None:
                    if path.strip("/") not in layer.entries:
                        layer.add_symlink(path, target)
                    continue
                with open(os.path.realpath(real), "rb") as f:
                    data = f.read()
                check_machine(real, data, platform)
                layer.add_bytes(path, data, stat.S_IMODE(os.stat(real).st_mode) & 0o755)
            continue
        for lib in ldd(src):
            real = os.path.realpath(lib)
            with open(real, "rb") as f:
                data = f.read()
            check_machine(real, data, platform)
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
    os_name, arch = platform.split("/")
    config = canonical({
        "architecture": arch,
        "os": os_name,
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
    top = {"mediaType": MEDIA_MANIFEST, "digest": sha(manifest), "size": len(manifest),
           "platform": {"architecture": arch, "os": os_name}}
    docker = {"Config": blob_path(sha(config)), "Layers": [blob_path(diff_id)]}
    write_archive(args.out, mtime, args.name, top, docker, [config, manifest, layer_tar])
    print(top["digest"])


def blob_path(digest):
    return "blobs/sha256/" + digest.split(":")[1]


def write_archive(out, mtime, names, top, docker, blobs):
    """An OCI layout whose index.json has one entry, TOP (a manifest or an
    index descriptor) named by the first of NAMES, docker's manifest.json
    (DOCKER: Config and Layers of one image, tagged with every name), and
    BLOBS."""
    name = names[0]
    top = dict(top, annotations={
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name[len(repository(name)) + 1:] or "latest",
    })
    index = canonical({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [top]})
    docker = canonical([dict(docker, RepoTags=[docker_tag(n) for n in names])])
    outer = Layer(mtime)
    outer.add_bytes("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}), 0o644)
    outer.add_bytes("index.json", index, 0o644)
    outer.add_bytes("manifest.json", docker, 0o644)
    for data in blobs:
        outer.add_bytes(blob_path(sha(data)), data, 0o644)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(outer.tar())
    os.replace(tmp, out)


class Archive:
    """An archive this script wrote, read back: its blobs by digest and
    index.json's one entry."""

    def __init__(self, path):
        self.blobs = {}
        with tarfile.open(path) as t:
            for ti in t.getmembers():
                if ti.isfile():
                    data = t.extractfile(ti).read()
                    if ti.name.startswith("blobs/sha256/"):
                        self.blobs["sha256:" + ti.name.rsplit("/", 1)[1]] = data
                    elif ti.name in ("index.json", "manifest.json"):
                        setattr(self, ti.name.split(".")[0], json.loads(data))
        self.top = self.index["manifests"][0]

    def json(self, digest):
        return json.loads(self.blobs[digest])

    def images(self):
        """{platform: manifest descriptor} of the archive's images."""
        if self.top["mediaType"] == MEDIA_INDEX:
            ms = self.json(self.top["digest"])["manifests"]
        else:
            ms = [self.top]
        return {"{os}/{architecture}".format(**m["platform"]): m for m in ms}


def index(args):
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    manifests, blobs, docker = [], {}, {}
    for path in args.archives:
        a = Archive(path)
        if a.top["mediaType"] != MEDIA_MANIFEST:
            die(f"{path}: not one image (an index archive cannot go in an index)")
        m = {k: a.top[k] for k in ("mediaType", "digest", "size", "platform")}
        plat = "{os}/{architecture}".format(**m["platform"])
        if plat in docker:
            die(f"{path}: a second image for {plat}")
        manifests.append(m)
        blobs.update(a.blobs)
        docker[plat] = {k: a.manifest[0][k] for k in ("Config", "Layers")}
    idx = canonical({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests})
    top = {"mediaType": MEDIA_INDEX, "digest": sha(idx), "size": len(idx)}
    first = "{os}/{architecture}".format(**manifests[0]["platform"])
    write_archive(args.out, mtime, args.name, top, docker.get(host_platform(), docker[first]),
                  [idx] + [blobs[d] for d in sorted(blobs)])
    print(top["digest"])


def inspect(args):
    a = Archive(args.archive)
    images = a.images()
    platform = args.platform or (host_platform() if host_platform() in images else next(iter(images)))
    if platform not in images:
        die(f"{args.archive} has no {platform} image (it has {', '.join(images)})")
    m = images[platform]
    manifest = a.json(m["digest"])
    config = a.json(manifest["config"]["digest"])
    files = {}
    for l in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(a.blobs[l["digest"]])) as lt:
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
        # What to pin: the index's digest in an index archive.
        "digest": a.top["digest"],
        "names": [x["annotations"].get("io.containerd.image.name") for x in a.index["manifests"]],
        "platforms": {p: d["digest"] for p, d in images.items()},
        "platform": platform,
        "docker": a.manifest,
        "config": config,
        "files": files,
    }, indent=1, sort_keys=True))


def unpack(args):
    a = Archive(args.archive)
    images = a.images()
    if args.platform not in images:
        die(f"{args.archive} has no {args.platform} image (it has {', '.join(images)})")
    manifest = a.json(images[args.platform]["digest"])
    os.makedirs(args.dir, exist_ok=True)
    # Our own archive: its absolute symlinks (the loader's) are wanted.
    trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    for l in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(a.blobs[l["digest"]])) as lt:
            lt.extractall(args.dir, **trusted)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--name", action="append", required=True)
    b.add_argument("--platform")
    b.add_argument("--sysroot")
    for flag in ("file", "cap", "libs-of", "symlink", "dir", "text", "env", "expose", "label"):
        b.add_argument("--" + flag, action="append", default=[])
    for flag in ("entrypoint", "cmd", "user", "workdir"):
        b.add_argument("--" + flag)
    x = sub.add_parser("index")
    x.add_argument("--out", required=True)
    x.add_argument("--name", action="append", required=True)
    x.add_argument("archives", nargs="+")
    i = sub.add_parser("inspect")
    i.add_argument("archive")
    i.add_argument("--platform")
    u = sub.add_parser("unpack")
    u.add_argument("archive")
    u.add_argument("--platform", required=True)
    u.add_argument("dir")
    args = p.parse_args()
    {"build": build, "index": index, "inspect": inspect, "unpack": unpack}[args.action](args)


if __name__ == "__main__":
    main()
