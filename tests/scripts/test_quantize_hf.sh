#!/bin/sh
# `vllmc quantize` from a Hugging Face folder: stories260K-hf (F32
# safetensors, rotate-half q/k rows) to Q8_0 must give, tensor by tensor, the
# very bytes that quantizing the same weights from stories260K.gguf gives
# (llama.cpp names, q/k rows permuted back to GGUF's RoPE layout), hence the
# same greedy tokens and text; its tokenizer comes from the folder's
# tokenizer.json kept in the file. The BF16 folder converts and runs; an
# already-quantized folder and a missing one are refused with a message.
set -eu
bin=$1
shared=${VLLMC_SHARED_DIR:-../shared}
hf=$shared/models/stories260K-hf
gguf=$shared/models/stories260K.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin" quantize "$hf" "$tmp/hf.q8.gguf" --type Q8_0 --threads 2 >"$tmp/log.hf" 2>&1 ||
    { cat "$tmp/log.hf"; fail "quantize $hf"; }
"$bin" quantize "$gguf" "$tmp/gg.q8.gguf" --type Q8_0 --threads 2 >"$tmp/log.gg" 2>&1 ||
    { cat "$tmp/log.gg"; fail "quantize $gguf"; }
# 48 tensors with an error line each, and the summary.
n=$(grep -c 'rmse .* max_abs' "$tmp/log.hf" || true)
[ "$n" -eq 49 ] || { cat "$tmp/log.hf"; fail "$n error lines, expected 49"; }
grep -q '^blk.0.attn_q.weight .*f32 *-> q8_0 *rmse' "$tmp/log.hf" || fail "no attn_q error line"
sed -n 's/^quantize: .*relative rmse/relative rmse/p' "$tmp/log.hf"

python3 tests/scripts/gguf_tensors.py "$tmp/hf.q8.gguf" >"$tmp/t.hf"
python3 tests/scripts/gguf_tensors.py "$tmp/gg.q8.gguf" >"$tmp/t.gg"
diff "$tmp/t.hf" "$tmp/t.gg" >"$tmp/t.diff" || { cat "$tmp/t.diff"; fail "tensors differ"; }
echo "tensors: $(wc -l <"$tmp/t.hf") equal to the GGUF-quantized ones"

for f in hf gg; do
    "$bin" generate -m "$tmp/$f.q8.gguf" -p "Once upon a time" -n 48 -t 1 >"$tmp/text.$f" \
        2>"$tmp/err.$f" || { cat "$tmp/err.$f"; fail "generate $f"; }
    "$bin" generate -m "$tmp/$f.q8.gguf" --prompt-ids 1,403,407,261,378 -n 48 -t 1 --print-ids \
        >"$tmp/ids.$f" 2>"$tmp/err.$f" || { cat "$tmp/err.$f"; fail "generate ids $f"; }
done
cmp -s "$tmp/ids.hf" "$tmp/ids.gg" || { cat "$tmp/ids.hf" "$tmp/ids.gg"; fail "greedy ids differ"; }
cmp -s "$tmp/text.hf" "$tmp/text.gg" || { cat "$tmp/text.hf" "$tmp/text.gg"; fail "text differs"; }
grep -q "little girl" "$tmp/text.hf" || { cat "$tmp/text.hf"; fail "unexpected text"; }
"$bin" info "$tmp/hf.q8.gguf" | grep -q "tokenizer: *tokenizer.json (in GGUF)" ||
    fail "info does not see the tokenizer"

# BF16 weights convert too and generate.
"$bin" quantize "$shared/models/stories260K-hf-bf16" "$tmp/bf.gguf" --type Q4_0 --quiet \
    >"$tmp/log.bf" 2>&1 || { cat "$tmp/log.bf"; fail "quantize bf16"; }
grep -q 'blk.0.attn_q.weight .*bf16 *-> q4_0' "$tmp/log.bf" && fail "--quiet printed tensor lines"
"$bin" generate -m "$tmp/bf.gguf" -p "Once upon a time" -n 16 -t 1 >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "generate bf16 Q4_0"; }
grep -q "generated tokens: 16" "$tmp/err" || { cat "$tmp/err"; fail "bf16: no 16 tokens"; }

# Refusals: an already-quantized checkpoint, a folder without config.json.
mkdir "$tmp/awq"
cp "$hf"/* "$tmp/awq/"
sed 's/"torch_dtype"/"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}, "torch_dtype"/' \
    "$hf/config.json" >"$tmp/awq/config.json"
if "$bin" quantize "$tmp/awq" "$tmp/x.gguf" --type Q8_0 >"$tmp/err" 2>&1; then fail "accepted AWQ"; fi
grep -q "already quantized" "$tmp/err" || { cat "$tmp/err"; fail "no message for AWQ input"; }
mkdir "$tmp/empty"
if "$bin" quantize "$tmp/empty" "$tmp/x.gguf" --type Q8_0 >"$tmp/err" 2>&1; then
    fail "accepted an empty folder"; fi
grep -q "config.json" "$tmp/err" || { cat "$tmp/err"; fail "no message for a missing config"; }
[ ! -e "$tmp/x.gguf" ] || fail "left a partial output behind"
echo "quantize from safetensors: ok"
