#!/bin/sh
# Smoke test of the benchmarks at tiny sizes: gen-model writes loadable GGUF
# and safetensors copies that give the same greedy tokens; `vllmc bench` prints
# llama-bench's table and the bandwidth lines; `vllmc bench throughput` prints
# vLLM's throughput lines and the decode figure; `vllmc bench serve` prints
# vLLM's summary and writes its JSON against a stand-in OpenAI server and, when
# the command exists, against `vllmc serve`. Never a timing assertion.
set -eu
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_bench: $*"; exit 1; }
need() { grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 lacks '$2'"; }; }

shape="--layers 2 --dim 64 --ffn 128 --heads 4 --kv-heads 2 --head-dim 16 --vocab 600"
# shellcheck disable=SC2086
"$bin" gen-model -o "$tmp/m.gguf" --dtype f16 $shape 2>/dev/null
# shellcheck disable=SC2086
"$bin" gen-model -o "$tmp/m-hf" --format safetensors --dtype f16 $shape 2>/dev/null
[ -f "$tmp/m-hf/config.json" ] && [ -f "$tmp/m-hf/model.safetensors" ] || fail "no HF folder"
"$bin" info "$tmp/m.gguf" >"$tmp/info"
need "$tmp/info" "tensors:        21 (f32 5, f16 16)"
a=$("$bin" generate -m "$tmp/m.gguf" --prompt-ids 1,7,300 -n 8 --print-ids 2>/dev/null)
b=$("$bin" generate -m "$tmp/m-hf" --prompt-ids 1,7,300 -n 8 --print-ids 2>/dev/null)
[ "$a" = "$b" ] || fail "GGUF gives $a, safetensors $b"
# shellcheck disable=SC2086
"$bin" gen-model -o "$tmp/t.gguf" --tie-embeddings $shape 2>/dev/null
"$bin" info "$tmp/t.gguf" | grep -q "tied (lm_head = token_embd)" || fail "--tie-embeddings"
"$bin" gen-model -o "$tmp/x" --dtype f8 >/dev/null 2>&1 && fail "gen-model accepted --dtype f8"

"$bin" bench -p 32 -n 8 -r 2 --bandwidth-mib 16 >"$tmp/bench"
need "$tmp/bench" "| model                          |       size |     params | backend    | threads |            test |                  t/s | median t/s |"
need "$tmp/bench" " pp32 |"
need "$tmp/bench" " tg8 |"
need "$tmp/bench" "read bandwidth: "
need "$tmp/bench" "% of the read bandwidth"
"$bin" bench -m "$tmp/m-hf" -p 0 -n 4 -r 1 --bandwidth-mib 0 -t 1 >"$tmp/bench2"
need "$tmp/bench2" "| llama 0.15M F16"
grep -q " pp" "$tmp/bench2" && fail "-p 0 still ran a pp test"
"$bin" bench -r 0 >/dev/null 2>&1 && fail "bench accepted -r 0"
"$bin" bench -p 16 -n 4 -r 1 --bandwidth-mib 0 --kv-cache-dtype f16 >"$tmp/bench3" 2>"$tmp/bench3.err"
need "$tmp/bench3.err" "KV cache: f16"
need "$tmp/bench3" " tg4 |"
"$bin" bench --kv-cache-dtype q8 >/dev/null 2>&1 && fail "bench accepted --kv-cache-dtype q8"

"$bin" bench throughput --num-prompts 4 --input-len 8 --output-len 8 --max-num-seqs 4 \
    --kv-cache-memory-bytes 4000000 >"$tmp/tput" 2>/dev/null
need "$tmp/tput" "Throughput: "
need "$tmp/tput" " requests/s, "
need "$tmp/tput" " output tokens/s"
need "$tmp/tput" "Total num prompt tokens:  32"
need "$tmp/tput" "Total num output tokens:  32"
# Whether all four ever decode together depends on how fast they are added.
need "$tmp/tput" "Decode"
# The warm-up run (default on GPUs only) is untimed and shares no prefix
# block with the timed prompts; the summary counts the timed run alone.
"$bin" bench throughput --num-prompts 4 --input-len 32 --output-len 8 --max-num-seqs 4 --warmup \
    --kv-cache-memory-bytes 4000000 >"$tmp/tput-warm" 2>/dev/null
need "$tmp/tput-warm" "Warm-up: 4 requests, "
need "$tmp/tput-warm" "Total num prompt tokens:  128"
need "$tmp/tput-warm" "Total num output tokens:  32"
need "$tmp/tput-warm" "prefix-cache hits 0 of 128 prompt tokens"
grep -q "Warm-up" "$tmp/tput" && fail "bench throughput warmed up on the CPU by default"
"$bin" bench throughput --input-len 4000 --output-len 8 --num-prompts 1 >/dev/null 2>&1 &&
    fail "bench throughput accepted a prompt longer than the context"

serve_checks() { # $1: output file
    need "$1" "============ Serving Benchmark Result ============"
    need "$1" "Successful requests:                     6"
    need "$1" "Maximum request concurrency:             2"
    need "$1" "Total generated tokens:                  24"
    need "$1" "---------------Time to First Token----------------"
    need "$1" "-----Time per Output Token (excl. 1st token)------"
    need "$1" "---------------Inter-token Latency----------------"
    need "$1" "----------------End-to-end Latency----------------"
    need "$1" "P99 ITL (ms):"
    need "$1" "P50 E2EL (ms):"
}

if ! "$bin" bench serve --help >/dev/null 2>&1; then
    echo "test_bench: ok (built without libcurl: bench serve not tested)"
    exit 0
fi
python3 "$here/openai_stream_server.py" >"$tmp/port" &
pids="$pids $!"
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
port=$(cat "$tmp/port")
"$bin" bench serve --base-url "http://127.0.0.1:$port" --random-input-len 16 \
    --random-output-len 4 --num-prompts 6 --max-concurrency 2 --ignore-eos \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 \
    --save-result --save-detailed --result-dir "$tmp/res" >"$tmp/serve" 2>/dev/null
serve_checks "$tmp/serve"
need "$tmp/serve" "Vocabulary size (probed): 1000"
python3 -c '
import json, sys, glob
f = glob.glob(sys.argv[1] + "/openai-infqps-concurrency2-stream-mock-*.json")
r = json.load(open(f[0]))
assert r["completed"] == 6 and r["total_output_tokens"] == 24, r
assert len(r["itls"]) == 6 and all(len(x) == 3 for x in r["itls"]), r["itls"]
assert "p99_ttft_ms" in r and "p50_e2el_ms" in r
' "$tmp/res" || fail "bad result file"
# A finite rate prints and names the file as Python's repr does ("50.0",
# "1e+16"). One prompt at a high rate: its arrival is one short draw away.
for rate in 50 12.5 1e16; do
    "$bin" bench serve --base-url "http://127.0.0.1:$port" --random-input-len 8 \
        --random-output-len 2 --num-prompts 1 --request-rate $rate --save-result \
        --result-dir "$tmp/rate" >"$tmp/rate-$rate.out" 2>/dev/null
done
need "$tmp/rate-50.out" "Traffic request rate: 50.0"
need "$tmp/rate-1e16.out" "Traffic request rate: 1e+16"
for want in 50.0 12.5 1e+16; do
    ls "$tmp/rate" | grep -q "^openai-${want}qps-" || fail "no result file for ${want}qps: $(ls "$tmp/rate")"
done
"$bin" bench serve --base-url "http://127.0.0.1:1" --model x --random-vocab-size 10 \
    --num-prompts 1 >/dev/null 2>&1 && fail "bench serve succeeded without a server"

if "$bin" help | grep -q "^  serve "; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$bin" serve --host 127.0.0.1 --port "$port" >"$tmp/serve.log" 2>&1 &
    pids="$pids $!"
    i=0
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
        sleep 0.2
        i=$((i + 1))
        [ $i -lt 300 ] || { cat "$tmp/serve.log"; fail "vllmc serve did not start"; }
    done
    "$bin" bench serve --base-url "http://127.0.0.1:$port" --random-input-len 16 \
        --random-output-len 4 --num-prompts 6 --max-concurrency 2 --ignore-eos \
        --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 \
        >"$tmp/serve2" 2>/dev/null
    serve_checks "$tmp/serve2"
fi
echo "test_bench: ok"
