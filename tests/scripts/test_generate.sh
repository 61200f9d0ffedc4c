#!/bin/sh
# `vllmc generate` on the bundled model: from BOS alone, greedy, it must write
# the golden continuation (testdata/golden/stories260K.greedy.json, which is
# also llama2.c's published temperature-0 sample); with a text prompt it must
# give the golden token ids; bad input exits non-zero with one line.
set -eu
bin=$1
shared=${VLLMC_SHARED_DIR:-../shared}
golden=$shared/testdata/golden/stories260K.greedy.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bin" generate --max-tokens 40 >"$tmp/out" 2>"$tmp/err"
grep -q "prompt tokens: 1, generated tokens: 40" "$tmp/err" || {
    echo "stats line missing:"; cat "$tmp/err"; exit 1; }

"$bin" generate -p "Once upon a time" -n 40 --print-ids >"$tmp/ids" 2>/dev/null

node -e '
const fs = require("fs");
const g = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const bos = g.cases.find(c => c.prompt_token_ids.length === 1);
const want = bos.generated_text.trim();
const got = fs.readFileSync(process.argv[2], "utf8").trim();
if (got.length < 100 || !want.startsWith(got)) {
    console.error("generate printed:\n" + got + "\nexpected a prefix of:\n" + want);
    process.exit(1);
}
const once = g.cases.find(c => c.prompt === "Once upon a time");
const ids = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const wantIds = once.generated_token_ids.slice(0, 40);
if (JSON.stringify(ids) !== JSON.stringify(wantIds)) {
    console.error("--print-ids gave " + JSON.stringify(ids) + "\nexpected " + JSON.stringify(wantIds));
    process.exit(1);
}
' "$golden" "$tmp/out" "$tmp/ids"

# Sampling: a seed fixes the output; top-k 1 is greedy whatever the temperature.
"$bin" generate -t 1 -n 30 --temperature 0.9 --top-p 0.95 --seed 7 --print-ids >"$tmp/s1" 2>/dev/null
"$bin" generate -t 1 -n 30 --temperature 0.9 --top-p 0.95 --seed 7 --print-ids >"$tmp/s2" 2>/dev/null
"$bin" generate -t 1 -n 30 --temperature 0.9 --top-p 0.95 --seed 8 --print-ids >"$tmp/s3" 2>/dev/null
cmp -s "$tmp/s1" "$tmp/s2" || { echo "same seed, different samples"; exit 1; }
cmp -s "$tmp/s1" "$tmp/s3" && { echo "seeds 7 and 8 sampled the same 30 tokens"; exit 1; }
"$bin" generate -t 1 -p "Once upon a time" -n 40 --temperature 1.5 --top-k 1 --print-ids >"$tmp/k1" 2>/dev/null
cmp -s "$tmp/k1" "$tmp/ids" || { echo "top-k 1 is not greedy"; exit 1; }

# Errors: one line on stderr and exit status 1 (model) or 2 (usage).
if "$bin" generate -m "$tmp/missing.gguf" -n 1 >/dev/null 2>"$tmp/err"; then
    echo "a missing model file succeeded"; exit 1
fi
[ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "expected one error line:"; cat "$tmp/err"; exit 1; }
if "$bin" generate --max-tokens lots >/dev/null 2>&1; then
    echo "a bad --max-tokens succeeded"; exit 1
fi
# A value out of its range is a usage error that says which option and why.
for bad in "--top-p 0" "--top-p 1.5" "--temperature -1" "--top-k -1" "--max-tokens"; do
    rc=0
    "$bin" generate -n 1 $bad >/dev/null 2>"$tmp/err" || rc=$?
    opt=${bad%% *}
    [ "$rc" -eq 2 ] && grep -q -- "$opt" "$tmp/err" ||
        { echo "generate $bad: exit $rc, stderr: $(cat "$tmp/err")"; exit 1; }
done
echo "test_generate: ok"
