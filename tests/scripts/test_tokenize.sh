#!/bin/sh
# `vllmc tokenize` / `vllmc detokenize` against shared references: the bundled model's golden
# prompt ids, a Qwen3 chat prompt whose special tokens become single ids (from
# hf-tokenizers/chat-prompt-token-ids.json), id/piece pairs, and exact round trips.
set -eu
bin=$1
shared=${VLLMC_SHARED_DIR:-../shared}
hf=$shared/testdata/hf-tokenizers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_tokenize: $*"; exit 1; }

[ "$("$bin" tokenize --add-special --text "Once upon a time")" = "[1,403,407,261,378]" ] ||
    fail "stories260K with BOS: $("$bin" tokenize --add-special --text "Once upon a time")"
[ "$("$bin" tokenize "Once upon a time")" = "[403,407,261,378]" ] || fail "stories260K without BOS"

printf '<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n' >"$tmp/chat.txt"
want="[151644,872,198,9707,11,1246,525,498,30,151645,198,151644,77091,198]"
got=$("$bin" tokenize -m "$hf/qwen3" --file "$tmp/chat.txt")
[ "$got" = "$want" ] || fail "qwen3 chat prompt: $got"
got=$("$bin" tokenize -m "$hf/qwen3/tokenizer.json" --pieces --text "<|im_end|>Hi")
[ "$got" = '[[151645,"<|im_end|>"],[13048,"Hi"]]' ] || fail "pieces: $got"

"$bin" detokenize -m "$hf/qwen3" --ids "$want" >"$tmp/back.txt"
cmp -s "$tmp/chat.txt" "$tmp/back.txt" || fail "qwen3 detokenize: $(cat "$tmp/back.txt")"
"$bin" detokenize -m "$hf/qwen3" --skip-special --ids "$want" >"$tmp/skip.txt"
[ "$(cat "$tmp/skip.txt")" = "$(printf 'user\nHello, how are you?\nassistant')" ] ||
    fail "skip special: $(cat "$tmp/skip.txt")"
[ "$("$bin" detokenize --ids 1,403,407,261,378 --skip-special)" = "Once upon a time" ] ||
    fail "stories260K detokenize"

status=0
"$bin" detokenize --ids 70000 >/dev/null 2>"$tmp/err" || status=$?
[ "$status" -eq 1 ] && grep -q "outside the vocabulary" "$tmp/err" || fail "bad id: $status"
status=0
"$bin" tokenize -m "$tmp/nothing.json" --text x >/dev/null 2>"$tmp/err" || status=$?
[ "$status" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "missing tokenizer: $status"
echo "test_tokenize: ok"
