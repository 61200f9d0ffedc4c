#!/bin/sh
# vllmc bench-ops runs its decode and prefill step over a tiny Qwen3-like
# shape on the CPU: every op of the sequence passes the op contracts and the
# tool prints one line per case.
set -eu
out=$("$1" bench-ops --device cpu --section decode --model tiny --iters 1)
echo "$out"
for b in 1 8 64; do
    echo "$out" | grep -q "^decode model=tiny batch=$b ctx=512 tokens=$b ms_per_step=" ||
        { echo "no decode line for batch $b"; exit 1; }
done
echo "$out" | grep -q "^prefill model=tiny batch=1 ctx=512 tokens=512 " || { echo "no prefill line"; exit 1; }
