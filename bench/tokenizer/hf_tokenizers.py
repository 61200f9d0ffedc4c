#!/usr/bin/env python3
"""Times Hugging Face `tokenizers` on the benchmark text, one thread, the whole text as one
string, add_special_tokens=False, and prints the same line format as bench_tokenizer
(ids_fnv equal means the same ids). Usage: hf_tokenizers.py tokenizer.json TEXT [REPS]"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import Tokenizer  # noqa: E402


def fnv(ids):
    h = 1469598103934665603
    for i in ids:
        h ^= i
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    path, text_path = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    n_bytes = len(text.encode("utf-8"))
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(path)
    load = time.perf_counter() - t0
    best, ids = 1e30, None
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        best = min(best, time.perf_counter() - t0)
    import tokenizers
    print(f"bench=tokenize impl=hf-tokenizers-{tokenizers.__version__} tokenizer={path} "
          f"bytes={n_bytes} tokens={len(ids)} load_ms={load * 1e3:.0f} "
          f"mb_per_s={n_bytes / best / 1e6:.2f} ids_fnv={fnv(ids):016x}")


if __name__ == "__main__":
    main()
