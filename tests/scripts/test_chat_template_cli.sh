#!/bin/sh
# vllmc chat-template against the shared expected renderings (made by
# transformers/Jinja2): every case of a few templates, byte for byte, plus the
# exit status and message of a template that raises.
# Usage: test_chat_template_cli.sh PATH_TO_VLLMC
set -eu
VLLMC=$1
SHARED=${VLLMC_SHARED_DIR:-../shared}/testdata/chat-templates
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
for name in qwen3 llama3.1 mistral-instruct gemma2 chatml; do
    python3 - "$SHARED" "$name" "$dir" <<'PY'
import json, sys
shared, name, out = sys.argv[1:]
d = json.load(open(f"{shared}/expected/{name}.json"))
for i, c in enumerate(d["cases"]):
    if "output" not in c:
        continue
    json.dump(c["messages"], open(f"{out}/{name}.{i}.messages.json", "w"))
    if c.get("tools") is not None:
        json.dump(c["tools"], open(f"{out}/{name}.{i}.tools.json", "w"))
    args = ["--template", f"{shared}/{d['template_file']}"]
    if not c.get("add_generation_prompt", True):
        args.append("--no-generation-prompt")
    vars = dict(d.get("special_tokens") or {})
    vars.update(c.get("extra_variables") or {})
    for k, v in vars.items():
        args += ["--var", f"{k}={json.dumps(v)}"]
    open(f"{out}/{name}.{i}.args", "w").write("\n".join(args))
    open(f"{out}/{name}.{i}.expected", "w", newline="").write(c["output"])
PY
done
n=0
for args in "$dir"/*.args; do
    base=${args%.args}
    set --
    while IFS= read -r line || [ -n "$line" ]; do set -- "$@" "$line"; done <"$args"
    [ -f "$base.tools.json" ] && set -- "$@" --tools "$base.tools.json"
    SOURCE_DATE_EPOCH=1721995200 "$VLLMC" chat-template --messages "$base.messages.json" "$@" >"$base.got" ||
        { echo "FAIL $(basename "$base"): exit $?"; fail=1; continue; }
    if cmp -s "$base.got" "$base.expected"; then n=$((n + 1)); else
        echo "FAIL $(basename "$base"): rendering differs"; fail=1; fi
done
echo "chat-template: $n renderings equal the expected ones"
[ "$n" -ge 20 ] || { echo "FAIL: too few cases ($n)"; fail=1; }

# A template that raises: exit 1 and the template's own message.
printf '{{ raise_exception("roles must alternate") }}' >"$dir/raise.jinja"
echo '[{"role":"user","content":"hi"}]' >"$dir/m.json"
if "$VLLMC" chat-template --template "$dir/raise.jinja" --messages "$dir/m.json" 2>"$dir/err"; then
    echo "FAIL: a raising template exited 0"; fail=1
elif ! grep -q "roles must alternate" "$dir/err"; then
    echo "FAIL: message missing: $(cat "$dir/err")"; fail=1
else
    echo "ok   raise_exception exits 1 with its message"
fi
# The model's own template through -m (Phi-3's vocabulary GGUF carries one).
"$VLLMC" chat-template -m "${VLLMC_SHARED_DIR:-../shared}/testdata/tokenizer/ggml-vocab-phi-3.gguf" \
    --messages "$dir/m.json" >"$dir/phi3" || { echo "FAIL: -m phi-3"; fail=1; }
grep -q "<|user|>" "$dir/phi3" && echo "ok   -m uses the model's template" ||
    { echo "FAIL: phi-3 rendering: $(cat "$dir/phi3")"; fail=1; }
exit "$fail"
