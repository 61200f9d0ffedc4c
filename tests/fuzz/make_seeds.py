#!/usr/bin/env python3
"""Writes the seed corpora of fuzz_gguf and fuzz_safetensors from the models in
the shared test data: cut-down real headers and small hand-made files.
Usage: make_seeds.py SHARED_DIR CORPUS_DIR"""
import json, os, struct, sys

shared, corpus = sys.argv[1], sys.argv[2]
gdir = os.path.join(corpus, "fuzz_gguf")
sdir = os.path.join(corpus, "fuzz_safetensors")
os.makedirs(gdir, exist_ok=True)
os.makedirs(sdir, exist_ok=True)


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- GGUF ----
def gguf_kv_end(b):
    """Offset where the metadata of a GGUF image ends (tensor infos start)."""
    ver = struct.unpack_from("<I", b, 4)[0]
    cnt = "<I" if ver == 1 else "<Q"
    cs = struct.calcsize(cnt)
    p = 8 + 2 * cs
    n_kv = struct.unpack_from(cnt, b, 8 + cs)[0]
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, p):
        if t == 8:
            return p + cs + struct.unpack_from(cnt, b, p)[0]
        if t == 9:
            et = struct.unpack_from("<I", b, p)[0]
            n = struct.unpack_from(cnt, b, p + 4)[0]
            p += 4 + cs
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + size[t]

    for _ in range(n_kv):
        p += cs + struct.unpack_from(cnt, b, p)[0]
        t = struct.unpack_from("<I", b, p)[0]
        p = skip(t, p + 4)
    return p


def gguf_small(ver, tensors, kvs, align=32):
    cnt = "<I" if ver == 1 else "<Q"
    out = b"GGUF" + struct.pack("<I", ver) + struct.pack(cnt, len(tensors)) + struct.pack(cnt, len(kvs))

    def s(x):
        return struct.pack(cnt, len(x)) + x

    for key, t, payload in kvs:
        out += s(key) + struct.pack("<I", t) + payload
    off = 0
    data = b""
    for name, ne, dtype, nbytes in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack(cnt, d) for d in ne)
        out += struct.pack("<I", dtype) + struct.pack("<Q", off)
        blob = bytes((i * 13 + 5) & 255 for i in range(nbytes))
        data += blob + b"\0" * ((-len(blob)) % align)
        off = len(data)
    out += b"\0" * ((-len(out)) % align)
    return out + data


for path, tag in [("models/stories260K.gguf", "stories260K"),
                  ("models/tinyllamas-stories-260k-f32.gguf", "tinyllamas-v1")]:
    b = read(os.path.join(shared, path))
    write(gdir, tag + "-head4k", b[:4096])
    # The metadata alone, with the tensor count set to 0: a valid file.
    ver = struct.unpack_from("<I", b, 4)[0]
    cnt = "<I" if ver == 1 else "<Q"
    end = gguf_kv_end(b)
    meta = bytearray(b[:end])
    struct.pack_into(cnt, meta, 8, 0)
    write(gdir, tag + "-metadata", bytes(meta))

for ver in (1, 2, 3):
    cnt = "<I" if ver == 1 else "<Q"
    kvs = [
        (b"general.architecture", 8, struct.pack(cnt, 5) + b"llama"),
        (b"general.alignment", 4, struct.pack("<I", 32)),
        (b"t.i8", 1, b"\xfb"),
        (b"t.f64", 12, struct.pack("<d", 3.25)),
        (b"t.bool", 7, b"\x01"),
        (b"t.arr", 9, struct.pack("<I", 5) + struct.pack(cnt, 3) + struct.pack("<3i", 1, -2, 3)),
        (b"t.strs", 9, struct.pack("<I", 8) + struct.pack(cnt, 2) + struct.pack(cnt, 1) + b"a" +
         struct.pack(cnt, 2) + b"bc"),
    ]
    tensors = [(b"a", [4, 2], 0, 32), (b"b", [8], 1, 16), (b"q", [32], 2, 18)]
    write(gdir, "crafted-v%d" % ver, gguf_small(ver, tensors, kvs))

# ---- safetensors ----
def st_file(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


for folder in ("stories260K-hf", "stories260K-hf-bf16", "stories260K-hf-sharded"):
    for name in sorted(os.listdir(os.path.join(shared, "models", folder))):
        if not name.endswith(".safetensors"):
            continue
        b = read(os.path.join(shared, "models", folder, name))
        n = struct.unpack_from("<Q", b, 0)[0]
        hdr = json.loads(b[8:8 + n])
        # Keep the real header but shrink every tensor to a few elements so the
        # seed stays small and still valid.
        small, off = {}, 0
        for k, v in hdr.items():
            if k == "__metadata__":
                small[k] = v
                continue
            es = {"F32": 4, "BF16": 2, "F16": 2}[v["dtype"]]
            shape = [2] * len(v["shape"])
            size = es * (2 ** len(shape))
            small[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + size]}
            off += size
        write(sdir, folder + "-" + name.split(".")[0] + "-small", st_file(small, bytes(i & 255 for i in range(off))))

write(sdir, "crafted-all-dtypes", st_file({
    "__metadata__": {"format": "pt"},
    "f": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "h": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]},
    "b": {"dtype": "BF16", "shape": [1], "data_offsets": [22, 24]},
    "i8": {"dtype": "I8", "shape": [4], "data_offsets": [24, 28]},
    "u8": {"dtype": "U8", "shape": [4], "data_offsets": [28, 32]},
    "i32": {"dtype": "I32", "shape": [2], "data_offsets": [32, 40]},
    "i64": {"dtype": "I64", "shape": [1, 1, 1, 1], "data_offsets": [40, 48]},
    "s": {"dtype": "F32", "shape": [], "data_offsets": [48, 52]},
    "z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [52, 52]},
}, bytes(range(52))))
write(sdir, "crafted-empty", st_file({}, b""))
