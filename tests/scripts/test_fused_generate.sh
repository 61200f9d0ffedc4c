#!/bin/sh
# The fused q|k|v and gate|up layout forced on the CPU (VLLMC_FUSE=1, what
# device backends load) generates the same greedy tokens as the split one on
# a gen-model shape with grouped-query attention, and its forward pass runs
# qkv_rope_store and the packed silu_mul (the provider log says so).
set -eu
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_fused_generate: $*"; exit 1; }
for dtype in f32 f16; do
    "$bin" gen-model -o "$tmp/m.gguf" --dtype $dtype --layers 2 --dim 128 --ffn 320 --heads 8 \
        --kv-heads 2 --head-dim 16 --vocab 600 --seed 7 2>/dev/null
    split=$(VLLMC_FUSE=0 "$bin" generate -m "$tmp/m.gguf" --prompt-ids 1,7,300,41 -n 24 \
        --print-ids -t 2 2>/dev/null)
    fused=$(VLLMC_FUSE=1 "$bin" generate -m "$tmp/m.gguf" --prompt-ids 1,7,300,41 -n 24 \
        --print-ids -t 2 --log-providers 2>"$tmp/log")
    echo "$dtype split: $split"
    echo "$dtype fused: $fused"
    [ -n "$split" ] && [ "$split" = "$fused" ] || fail "$dtype: split $split, fused $fused"
    grep -q "op=qkv_rope_store" "$tmp/log" || { cat "$tmp/log"; fail "no qkv_rope_store ran"; }
    grep -q "op=silu_mul .*packed" "$tmp/log" || { cat "$tmp/log"; fail "no packed silu_mul ran"; }
    if VLLMC_FUSE=0 "$bin" generate -m "$tmp/m.gguf" --prompt-ids 1,7 -n 2 --log-providers \
        2>&1 >/dev/null | grep -q "op=qkv_rope_store"; then
        fail "$dtype: VLLMC_FUSE=0 still ran qkv_rope_store"
    fi
done
