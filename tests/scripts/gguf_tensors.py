#!/usr/bin/env python3
"""Prints one line per tensor of a GGUF v2/v3 file: name, type id, shape and
the sha256 of its data, sorted by name, so that two files can be compared
tensor by tensor whatever their order. Python stdlib only."""
import hashlib
import struct
import sys

# ggml type id -> (elements per block, bytes per block)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
          20: (32, 18), 23: (256, 136), 30: (1, 2)}
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def main(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    assert data[:4] == b"GGUF", "not GGUF"
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == "general.alignment":
            align = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        infos.append((name, take("I"), dims, take("Q")))
    base = (pos + align - 1) // align * align
    for name, t, dims, off in sorted(infos):
        per, size = BLOCKS[t]
        rows = 1
        for d in dims[1:]:
            rows *= d
        n_bytes = dims[0] // per * size * rows
        digest = hashlib.sha256(data[base + off:base + off + n_bytes]).hexdigest()[:16]
        print(name, t, "x".join(map(str, dims)), digest)


if __name__ == "__main__":
    main(sys.argv[1])
