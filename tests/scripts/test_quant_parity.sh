#!/bin/sh
# Every quantized GGUF model in shared/testdata/quant/models against the
# outputs llama.cpp recorded for it (vllmc parity, 0 FAIL):
#  - the fast providers (8-bit activations, like llama.cpp's CPU path) against
#    the `default` pass;
#  - the exact path (weights dequantized to f32, cpu-ref matmul) against the
#    `exact_dequant` pass, where every case must be EXACT: that pass is plain
#    f32 arithmetic on the same dequantized weights.
set -eu
vllmc="$1"
dir="${VLLMC_SHARED_DIR:-../shared}/testdata/quant/models"
fail=0
n=0
for model in "$dir"/*.gguf; do
    refs="${model%.gguf}.refs.json"
    name=$(basename "$model" .gguf)
    [ -f "$refs" ] || { echo "$name: no refs file"; fail=1; continue; }
    n=$((n + 1))
    out=$("$vllmc" parity --model "$model" --reference "$refs" --pass default --threads 2 2>&1 | tail -1) || true
    echo "$name fast/default: $out"
    case "$out" in *" 0 FAIL"*) ;; *) fail=1 ;; esac
    out=$(VLLMC_OP_PROVIDER_DISABLE=cpu-q-avx2,cpu-q-avx512,cpu-q-gemm-avx512 \
        "$vllmc" parity --model "$model" --reference "$refs" --pass exact_dequant --threads 2 2>&1 | tail -1) || true
    echo "$name exact/exact_dequant: $out"
    case "$out" in *"parity: 6 EXACT, 0 TOP_K_MATCH, 0 FAIL"*) ;; *) fail=1 ;; esac
done
[ "$n" -gt 0 ] || { echo "no models in $dir"; exit 1; }
exit "$fail"
