#!/bin/sh
# `vllmc quantize` on the bundled model (hidden 64, ffn 172): Q8_0, Q4_0 and
# Q4_K_M files are written with a per-tensor error line each, fall back per
# tensor where a block does not divide the row (and say so), come out the
# same whatever the thread count, load and generate; bad arguments and a bad
# input exit non-zero with a message.
set -eu
bin=$1
model=models/stories260K.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for t in Q8_0 Q4_0 Q4_K_M; do
    "$bin" quantize "$model" "$tmp/m.$t.gguf" --type "$t" --threads 2 >"$tmp/log.$t" 2>&1 ||
        { cat "$tmp/log.$t"; fail "quantize $t"; }
    # 48 tensors, one error line each, and the summary.
    n=$(grep -c 'rmse .* max_abs' "$tmp/log.$t" || true)
    [ "$n" -eq 49 ] || { cat "$tmp/log.$t"; fail "$t: $n error lines, expected 49"; }
    # ffn_down rows (172) take no block: F16, with a note.
    grep -q 'note: blk.0.ffn_down.weight: rows of 172 .* using f16' "$tmp/log.$t" ||
        fail "$t: no fallback note for ffn_down"
    "$bin" quantize "$model" "$tmp/one.gguf" --type "$t" --threads 1 --quiet >/dev/null
    cmp -s "$tmp/one.gguf" "$tmp/m.$t.gguf" || fail "$t: output depends on the thread count"
    "$bin" generate -m "$tmp/m.$t.gguf" -p "Once upon a time" -n 24 -t 2 >"$tmp/out" 2>"$tmp/err" ||
        { cat "$tmp/err"; fail "generate with $t"; }
    grep -q "generated tokens: 24" "$tmp/err" || { cat "$tmp/err"; fail "$t: no 24 tokens"; }
    [ -s "$tmp/out" ] || fail "$t: empty text"
    echo "$t: $(tail -1 "$tmp/log.$t")"
done
grep -q 'attn_q.weight .*f32 *-> q5_0' "$tmp/log.Q4_K_M" || fail "Q4_K_M: attn_q not q5_0 (fallback)"
grep -q 'attn_q.weight .*f32 *-> q8_0' "$tmp/log.Q8_0" || fail "Q8_0: attn_q not q8_0"

# Relative RMSE of the whole model: 8 bits well under 1 %, 4 bits under 10 %.
rel() { sed -n 's/.*relative rmse \([0-9.e+-]*\).*/\1/p' "$tmp/log.$1"; }
awk -v a="$(rel Q8_0)" -v b="$(rel Q4_0)" 'BEGIN { exit !(a < 0.01 && b < 0.1 && a < b) }' ||
    fail "relative rmse Q8_0 $(rel Q8_0), Q4_0 $(rel Q4_0)"

# Errors: unknown type, missing input, a file that is not GGUF.
if "$bin" quantize "$model" "$tmp/x.gguf" --type Q7_X >"$tmp/err" 2>&1; then fail "accepted Q7_X"; fi
grep -q "unknown type" "$tmp/err" || fail "no message for an unknown type"
if "$bin" quantize "$tmp/none.gguf" "$tmp/x.gguf" --type Q8_0 >"$tmp/err" 2>&1; then
    fail "accepted a missing input"; fi
printf 'not a gguf file at all' >"$tmp/bad.gguf"
if "$bin" quantize "$tmp/bad.gguf" "$tmp/x.gguf" --type Q8_0 >"$tmp/err" 2>&1; then
    fail "accepted a bad input"; fi
[ ! -e "$tmp/x.gguf" ] || fail "left a partial output behind"
echo "quantize: ok"
