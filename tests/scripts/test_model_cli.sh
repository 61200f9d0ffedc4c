#!/bin/sh
# `vllmc info` and `vllmc parity` on the shared models: info reports the
# bundled model's shapes; parity is EXACT against the float64 golden at batch 1
# and 8, and FAILs (exit 1) where the BF16 copy really departs from F32.
set -eu
bin=$1
shared=${VLLMC_SHARED_DIR:-../shared}
golden=$shared/testdata/golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_model_cli: $*"; exit 1; }

"$bin" info >"$tmp/info"
for want in "GGUF v3" "architecture:   llama" "8 query, 4 key/value (grouped-query), head_dim 8" \
    "parameters:     292800" "tokenizer:      llama (SentencePiece BPE)" "chat template:  no" \
    "rope:           theta 10000, 8 of 8 dims, adjacent pairs"; do
    grep -qF "$want" "$tmp/info" || fail "info lacks '$want'"
done
"$bin" info "$shared/models/stories260K-hf" >"$tmp/info"
grep -qF "rotate-half" "$tmp/info" || fail "HF info lacks rotate-half RoPE"

# A truncated model file: one line naming the file, exit status 1.
head -c 5000 "$shared/models/stories260K.gguf" >"$tmp/cut.gguf"
status=0
"$bin" info "$tmp/cut.gguf" >/dev/null 2>"$tmp/err" || status=$?
[ "$status" -eq 1 ] || fail "truncated file: exit status $status"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "cut.gguf" "$tmp/err" || fail "truncated file: $(cat "$tmp/err")"

"$bin" parity -t 1 --reference "$golden/stories260K.greedy.json" >"$tmp/p1" || fail "parity batch 1: $(cat "$tmp/p1")"
grep -q "parity: 4 EXACT, 0 TOP_K_MATCH, 0 FAIL" "$tmp/p1" || fail "parity batch 1: $(cat "$tmp/p1")"
"$bin" parity -t 1 -m "$shared/models/stories260K-hf-sharded" --batch 8 \
    --reference "$golden/stories260K.greedy.json" >"$tmp/p8" || fail "parity batch 8: $(cat "$tmp/p8")"
grep -q "parity: 8 EXACT" "$tmp/p8" || fail "parity batch 8: $(cat "$tmp/p8")"

# BF16 weights change prompt 3's greedy text: the F32 reference must flag it.
status=0
"$bin" parity -t 1 -m "$shared/models/stories260K-hf-bf16" --reference "$golden/stories260K.greedy.json" \
    >"$tmp/pb" || status=$?
[ "$status" -eq 1 ] && grep -q "FAIL at step" "$tmp/pb" || fail "bf16 vs f32: status $status: $(cat "$tmp/pb")"
"$bin" parity -t 1 -m "$shared/models/stories260K-hf-bf16" \
    --reference "$golden/stories260K-hf-bf16.greedy.json" >"$tmp/pb" || fail "bf16: $(cat "$tmp/pb")"
echo "test_model_cli: ok"
