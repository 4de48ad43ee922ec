#!/usr/bin/env python3
"""tools/gpu-pack.sh's helpers (standard library only).

  gpu_pack.py fatbin IN OUT [--sm 90]
      Copies the ELF shared library IN to OUT with every fatbin entry that an sm_90 GPU can never
      run zeroed in place: the section's layout, every container and entry header and the file's
      size stay as they were, so the ELF and the fatbin stay valid and only the zeroed payloads
      (which xz then squeezes to nothing) are gone. onnxruntime-gpu's CUDA provider (284 MB) ships
      cubins for sm_75 to sm_120; an H200 is sm_90 and loads only those.

Kept in each container (one per compiled CUDA file):
  - every cubin (ELF) built for sm_90 exactly: a cubin runs only on its own major architecture;
  - where a container has no sm_90 cubin, every PTX entry for an architecture <= 90 (the driver
    compiles the newest of those for the GPU at load time);
  - entries of a kind this parser does not know.
Everything else (cubins for other architectures, PTX where an sm_90 cubin exists) is zeroed.
Refuses (exit 1) when the file has no sm_90 cubin at all, or when anything in the section does not
parse exactly (a container or entry running past its end, bytes between containers).

  gpu_pack.py bundle MANIFEST --out DIR [--limit-mib 60] [--info FILE]
      Packs the MANIFEST's items (lines CLASS<TAB>NAME<TAB>SOURCE; CLASS ort, need or photo; SOURCE a
      file or a folder, links followed; NAME its path in the archive) into at most two xz tarballs,
      DIR/gpu-1.tar.xz and DIR/gpu-2.tar.xz, each under --limit-mib: ort items go in the first, need
      items wherever they fit (it fails if one does not), photo items (a folder: its files, smallest
      first, folder by folder in MANIFEST order) where they fit, the others dropped and listed.
      Each item is compressed on its own, as an xz stream holding its tar members, and cached in
      DIR/segments by content: a bundle is its items' streams one after another, then a stream
      holding the end of the archive. xz and tar read concatenated streams as one (Python's
      tarfile too), so the sizes are known exactly before a bundle is written, and a new binary
      costs one item's compression, not the CUDA provider's three minutes. --info FILE's text is
      written into the last bundle as pack.txt, followed by what went where.

Fatbin layout (reverse-engineered by others from cuobjdump; checked here by the sizes adding up):
  container: u32 magic 0xBA55ED50, u16 version 1, u16 header size 16, u64 size of what follows
  entry:     u16 kind (1 PTX, 2 cubin, 0x10 cubin), u16, u32 header size (64, 80 or 112),
             u64 payload size (padded to 8), u32 compressed size, u32, u32 minor, u32 sm arch, ...
             then the payload; the next entry starts right after it.
"""
import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile

MAGIC = 0xBA55ED50
PTX, CUBIN, CUBIN_ALT = 0x01, 0x02, 0x10
KIND_NAMES = {PTX: "ptx", CUBIN: "cubin", CUBIN_ALT: "cubin"}


def section(data, name):
    """(offset, size) of the ELF64 little-endian section NAME in DATA."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit("fatbin: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i):  # name, type, flags, addr, offset, size
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
    names_off = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        end = data.index(b"\0", names_off + h[0])
        if data[names_off + h[0]:end].decode() == name:
            return h[4], h[5]
    sys.exit(f"fatbin: no {name} section")


def entries(data, start, size):
    """Yields (container_offset, entry_offset, kind, arch, header_size, payload_size) for every entry
    of the fatbin containers in DATA[start:start+size]; exits on anything that does not parse."""
    pos, end = start, start + size
    while pos < end:
        if data[pos] == 0:  # padding between containers: zeros only
            pos += 1
            continue
        if end - pos < 16:
            sys.exit(f"fatbin: {end - pos} stray bytes at 0x{pos:x}")
        magic, version, header_size, body = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC or version != 1 or header_size != 16:
            sys.exit(f"fatbin: no container at 0x{pos:x} (magic 0x{magic:08x}, version {version})")
        cend = pos + header_size + body
        if cend > end:
            sys.exit(f"fatbin: container at 0x{pos:x} runs past the section")
        e = pos + header_size
        while e < cend:
            if cend - e < 64:
                sys.exit(f"fatbin: entry at 0x{e:x} cut short")
            kind, _, ehs, payload, _, _, _, arch = struct.unpack_from("<HHIQIIII", data, e)
            if not 64 <= ehs <= 4096 or e + ehs + payload > cend:
                sys.exit(f"fatbin: entry at 0x{e:x} (header {ehs}, payload {payload}) runs past its container")
            yield pos, e, kind, arch, ehs, payload
            e += ehs + payload
        pos = cend


def zero_unrunnable(data, listed, sm):
    """Zeroes in DATA the payloads of the LISTED entries (entries()'s) that an sm_SM GPU cannot run;
    returns {(kind name, arch): [kept, zeroed, kept bytes, zeroed bytes]} and the containers without
    an sm_SM cubin, and those of them with PTX the driver can compile for it."""
    by_container = collections.defaultdict(list)
    for ent in listed:
        by_container[ent[0]].append(ent)
    stats = collections.defaultdict(lambda: [0, 0, 0, 0])
    without, runnable_without = 0, 0
    for items in by_container.values():
        has_cubin = any(k in (CUBIN, CUBIN_ALT) and a == sm for _, _, k, a, _, _ in items)
        if not has_cubin:
            without += 1
            runnable_without += any(k == PTX and a <= sm for _, _, k, a, _, _ in items)
        for _, e, kind, arch, ehs, payload in items:
            if kind in (CUBIN, CUBIN_ALT):
                keep = arch == sm
            elif kind == PTX:
                keep = not has_cubin and arch <= sm
            else:
                keep = True  # unknown kind: leave it alone
            row = stats[(KIND_NAMES.get(kind, f"kind 0x{kind:x}"), arch)]
            row[0 if keep else 1] += 1
            row[2 if keep else 3] += payload
            if not keep:
                data[e + ehs:e + ehs + payload] = bytes(payload)
    return stats, len(by_container), without, runnable_without


def fatbin(args):
    with open(args.input, "rb") as f:
        data = bytearray(f.read())
    original_size = len(data)
    start, size = section(data, ".nv_fatbin")
    listed = list(entries(data, start, size))
    sm = args.sm
    stats, containers, without, runnable_without = zero_unrunnable(data, listed, sm)
    cubins = sum(row[0] for (kind, arch), row in stats.items() if kind == "cubin" and arch == sm)
    print(f"fatbin: {args.input}: .nv_fatbin {size / 1e6:.1f} MB, {containers} containers, "
          f"{len(listed)} entries")
    print(f"  {'entry':12s} {'kept':>6s} {'zeroed':>7s} {'kept MB':>8s} {'zeroed MB':>10s}")
    for (kind, arch), (kept, zeroed, kb, zb) in sorted(stats.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"  {kind + ' sm_' + str(arch):12s} {kept:6d} {zeroed:7d} {kb / 1e6:8.1f} {zb / 1e6:10.1f}")
    if without:
        print(f"  {without} containers have no sm_{sm} cubin ({runnable_without} with PTX the driver can "
              f"compile for sm_{sm}; the others hold no code an sm_{sm} GPU can run)")
    if not cubins:
        sys.exit(f"fatbin: no sm_{sm} cubin in {args.input}: refusing (this GPU could run nothing)")
    if args.output == args.input:
        sys.exit("fatbin: OUT must differ from IN")
    with open(args.output + ".tmp", "wb") as f:
        f.write(data)
    shutil.copymode(args.input, args.output + ".tmp")
    # The copy must parse to the same containers and entries: only payload bytes changed.
    if list(entries(data, start, size)) != listed or len(data) != original_size:
        sys.exit("fatbin: the zeroed copy does not parse as the original did")
    os.replace(args.output + ".tmp", args.output)
    print(f"  kept {sum(r[2] for r in stats.values()) / 1e6:.1f} MB of payload, zeroed "
          f"{sum(r[3] for r in stats.values()) / 1e6:.1f} MB -> {args.output}")


MIB = 1 << 20
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".heic", ".avif", ".gif", ".bmp", ".tif", ".tiff")
END_OF_ARCHIVE = bytes(1024)  # two zero blocks
XZ = ["xz", "--compress", "--stdout", "--threads=1"]
CODE_FILTER = ["--x86"]  # BCJ: 5-10 % off x86-64 code (the CUDA provider: 52.3 -> 51.8 MB)
LZMA = ["--lzma2=preset=6"]  # -9e took 3x the time for 1.4 % less on the CUDA provider


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def members(name, source):
    """[(archive name, real path)] of an item: the file, or every file under the folder, links followed."""
    if os.path.isfile(source):
        return [(name, os.path.realpath(source))]
    if not os.path.isdir(source):
        sys.exit(f"bundle: {source} ({name}) is neither a file nor a folder")
    found = []
    for dirpath, dirnames, filenames in os.walk(source, followlinks=True):
        dirnames.sort()
        for f in sorted(filenames):
            path = os.path.join(dirpath, f)
            found.append((os.path.join(name, os.path.relpath(path, source)), os.path.realpath(path)))
    return found


class Item:
    def __init__(self, kind, name, files):
        self.kind, self.name, self.files = kind, name, files
        self.raw = sum(os.path.getsize(p) for _, p in files)
        code = any(is_elf(p) for _, p in files)
        self.xz = XZ + (CODE_FILTER if code else []) + LZMA
        key = json.dumps([self.xz, [(n, os.path.getsize(p), sha256(p), os.access(p, os.X_OK)) for n, p in files]])
        self.key = hashlib.sha256(key.encode()).hexdigest()[:32]
        self.segment, self.size = None, None

    def tar_bytes(self, out):
        for name, path in self.files:
            info = tarfile.TarInfo(name)
            info.size = os.path.getsize(path)
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.mtime = 0  # content decides: the same files give the same bytes
            out.write(info.tobuf(tarfile.PAX_FORMAT))
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            out.write(bytes(-info.size % tarfile.BLOCKSIZE))

    def compress(self, cache):
        self.segment = os.path.join(cache, self.key + ".xz")
        if not os.path.exists(self.segment):
            with open(self.segment + ".tmp", "wb") as out:
                xz = subprocess.Popen(self.xz, stdin=subprocess.PIPE, stdout=out)
                self.tar_bytes(xz.stdin)
                xz.stdin.close()
                if xz.wait():
                    sys.exit(f"bundle: xz failed on {self.name}")
            os.replace(self.segment + ".tmp", self.segment)
        self.size = os.path.getsize(self.segment)
        return self


def end_segment(cache):
    path = os.path.join(cache, "end-of-archive.xz")
    if not os.path.exists(path):
        with open(path + ".tmp", "wb") as out:
            subprocess.run(XZ + LZMA, input=END_OF_ARCHIVE, stdout=out, check=True)
        os.replace(path + ".tmp", path)
    return path


def bundle(args):
    items = []
    for line in open(args.manifest):
        if not line.strip():
            continue
        kind, name, source = line.rstrip("\n").split("\t")
        if kind not in ("ort", "need", "photo"):
            sys.exit(f"bundle: unknown class {kind!r} in {args.manifest}")
        found = members(name, source)
        if kind == "photo" and os.path.isdir(source):  # a photo folder: each photo an item, smallest first
            photos = [(n, p) for n, p in found if n.lower().endswith(PHOTO_SUFFIXES)]
            items += [Item(kind, n, [(n, p)]) for n, p in sorted(photos, key=lambda f: (os.path.getsize(f[1]), f[0]))]
        else:
            items.append(Item(kind, name, found))
    cache = os.path.join(args.out, "segments")
    os.makedirs(cache, exist_ok=True)
    todo = sorted(items, key=lambda i: -i.raw)  # the CUDA provider first: it takes longest
    fresh = sum(not os.path.exists(os.path.join(cache, i.key + ".xz")) for i in items)
    print(f"bundle: {len(items)} items, {sum(i.raw for i in items) / MIB:.1f} MiB; compressing {fresh} "
          f"(the others are cached in {cache})", flush=True)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(lambda i: i.compress(cache), todo))
    end = end_segment(cache)
    reserve = os.path.getsize(end) + 64 * 1024  # the end of the archive, and pack.txt
    limit = int(args.limit_mib * MIB)
    bundles, dropped = [[], []], []

    def used(b):
        return sum(i.size for i in b) + reserve

    for item in items:  # the manifest's order: ort, then need, then photos, as gpu-pack.sh lists them
        fits = [b for b in (bundles if item.kind != "ort" else bundles[:1]) if used(b) + item.size < limit]
        if fits:
            fits[0].append(item)
        elif item.kind == "photo":
            dropped.append(item)
        else:
            sys.exit(f"bundle: {item.name} ({item.size / MIB:.1f} MiB compressed) fits in no bundle under "
                     f"{args.limit_mib} MiB")
    bundles = [b for b in bundles if b]
    info = open(args.info).read() if args.info else ""
    lines = [info.rstrip("\n"), ""] if info else []
    for n, b in enumerate(bundles, 1):
        lines.append(f"gpu-{n}.tar.xz: {len(b)} items, {sum(i.raw for i in b) / MIB:.1f} MiB -> "
                     f"{used(b) / MIB:.1f} MiB at most")
        lines += [f"  {i.size / MIB:7.2f} MiB  {i.name}" for i in b]
    lines.append(f"dropped (no room): {len(dropped)} photos" + "".join(f"\n  {i.name}" for i in dropped))
    info_path = os.path.join(cache, "pack.txt")
    with open(info_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    last = Item("need", "pack.txt", [("pack.txt", info_path)]).compress(cache)
    bundles[-1].append(last)
    for old in os.listdir(args.out):
        if old.startswith("gpu-") and old.endswith(".tar.xz"):
            os.remove(os.path.join(args.out, old))
    for n, b in enumerate(bundles, 1):
        path = os.path.join(args.out, f"gpu-{n}.tar.xz")
        with open(path + ".tmp", "wb") as out:
            for segment in [i.segment for i in b] + [end]:
                with open(segment, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        # Read back as the GPU machine will (Python's tarfile over the concatenated xz streams).
        with tarfile.open(path + ".tmp", "r:xz") as tar:
            names = tar.getnames()
        expected = [name for i in b for name, _ in i.files]
        if names != expected:
            sys.exit(f"bundle: {path} reads back {len(names)} members, not the {len(expected)} written")
        os.replace(path + ".tmp", path)
        size = os.path.getsize(path)
        tops = collections.Counter(name.split("/")[0] if not name.startswith("photos/") else "/".join(name.split("/")[:2])
                                   for name in names)
        print(f"bundle: {path}: {size / MIB:.2f} MiB ({size:,} bytes), {len(names)} files: "
              + ", ".join(f"{k} {v}" for k, v in sorted(tops.items())))
        if size >= limit:
            sys.exit(f"bundle: {path} is {size / MIB:.2f} MiB, over {args.limit_mib} MiB")
    if dropped:
        print(f"bundle: dropped {len(dropped)} photos for room ({sum(i.raw for i in dropped) / MIB:.1f} MiB): "
              + ", ".join(i.name for i in dropped))
    else:
        print("bundle: nothing dropped")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fatbin", help="zero the fatbin entries an sm_SM GPU cannot run")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--sm", type=int, default=90)
    p.set_defaults(func=fatbin)
    p = sub.add_parser("bundle", help="pack the manifest's items into at most two xz tarballs")
    p.add_argument("manifest")
    p.add_argument("--out", required=True)
    p.add_argument("--limit-mib", type=float, default=60)
    p.add_argument("--info")
    p.set_defaults(func=bundle)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
