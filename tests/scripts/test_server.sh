#!/bin/sh
# End-to-end: start `vllmc serve` on the bundled model, hit it with curl and
# with the official openai npm client, then stop it with SIGTERM (exit 0).
# Usage: test_server.sh PATH_TO_VLLMC
set -eu
VLLMC=$1
SHARED=${VLLMC_SHARED_DIR:-../shared}
GOLDEN=$SHARED/testdata/golden/stories260K.greedy.json
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT

# Values this build cannot honour are refused with a message, not ignored.
for bad in "--tensor-parallel-size 2" "--dtype float16" "--port 70000" "--device tpu"; do
    # shellcheck disable=SC2086
    if "$VLLMC" serve $bad >/dev/null 2>"$dir/refused"; then
        echo "FAIL: serve $bad was accepted"; exit 1
    fi
    grep -q "vllmc serve: " "$dir/refused" && echo "ok   serve $bad refused: $(head -c 70 "$dir/refused")" ||
        { echo "FAIL: serve $bad: no message"; exit 1; }
done

# Under AddressSanitizer keep the freed-memory quarantine small, so resident
# memory reflects live allocations (leaks are reported at exit by LSan).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"
# Port 0: the server picks a free port and prints it, so parallel tests never clash.
"$VLLMC" serve --port 0 --host 127.0.0.1 --chat-template tests/e2e/chatml.jinja \
    --max-body-bytes 65536 --kv-cache-memory-bytes 33554432 >"$dir/out" 2>"$dir/err" &
pid=$!
# Waits until the server in $1 (its stderr) prints its address; sets base.
wait_ready() {
    for _ in $(seq 1 600); do
        # The server's shell opens $1 after this one may first look at it.
        base=$(sed -n 's|.*serving .* on \(http://127.0.0.1:[0-9]*\).*|\1|p' "$1" 2>/dev/null || true)
        [ -n "$base" ] && curl -sf "$base/health" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$1"
    echo "server did not come up"
    exit 1
}
wait_ready "$dir/err"
grep -q "curl http://" "$dir/err" || { echo "no curl example in the start-up output"; exit 1; }
# The KV cache becomes resident in the background after start-up; the
# hostile test's flat-memory check starts once it is.
for _ in $(seq 1 1200); do grep -q "kv cache: .*resident" "$dir/err" && break; sleep 0.1; done
line=$(grep -o "kv cache: .*resident.*" "$dir/err" || true)
[ -n "$line" ] && echo "ok   $line" || { echo "FAIL: no word from the KV cache in 120 s"; exit 1; }

fail=0
expect() { # status method path body
    got=$(curl -s -o "$dir/body" -w '%{http_code}' -X "$2" "$base$3" \
        -H 'Content-Type: application/json' ${4:+-d "$4"})
    if [ "$got" = "$1" ]; then echo "ok   $2 $3 -> $got"; else
        echo "FAIL $2 $3 -> $got (want $1): $(cat "$dir/body")"; fail=1; fi
}
expect 200 GET /health
expect 200 GET /version
expect 200 GET /v1/models
expect 200 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}'
expect 400 POST /v1/completions '{"prompt":"Once upon a time",'
expect 400 POST /v1/completions '{"prompt":"x","temperature":"hot"}'
expect 400 POST /v1/completions '{"prompt":"x","suffix":"y"}'
expect 404 POST /v1/completions '{"model":"nope","prompt":"x"}'
expect 404 GET /v1/nothing
expect 405 GET /v1/completions
expect 200 POST /tokenize '{"prompt":"Once upon a time"}'
grep -q '"tokens":\[1,403,407,261,378\]' "$dir/body" || { echo "FAIL tokenize ids: $(cat "$dir/body")"; fail=1; }
expect 200 POST /detokenize '{"tokens":[403,407,261,378]}'
head -c 70000 /dev/zero | tr '\0' 'a' >"$dir/big"
got=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/completions" -H 'Content-Type: application/json' --data-binary @"$dir/big")
[ "$got" = 413 ] && echo "ok   413 for a 70 KB body" || { echo "FAIL oversized body -> $got"; fail=1; }
curl -sN "$base/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once","max_tokens":4,"stream":true}' >"$dir/sse"
tail -c 15 "$dir/sse" | grep -q 'data: \[DONE\]' && echo "ok   SSE ends with [DONE]" || { echo "FAIL SSE: $(cat "$dir/sse")"; fail=1; }

if [ -d tests/e2e/node_modules/openai ]; then
    VLLMC_BASE_URL=$base VLLMC_GOLDEN=$GOLDEN VLLMC_PID=$pid \
        node --test --test-concurrency=1 tests/e2e/openai.test.mjs tests/e2e/hostile.test.mjs || fail=1
else
    echo "FAIL: tests/e2e/node_modules is missing (run: npm ci --prefix tests/e2e)"; fail=1
fi

curl -s "$base/metrics" >"$dir/metrics"
for m in vllm:num_requests_running vllm:num_requests_waiting vllm:kv_cache_usage_perc \
    vllm:prompt_tokens_total vllm:generation_tokens_total vllm:request_success_total \
    vllm:num_preemptions_total vllm:prefix_cache_queries_total vllm:prefix_cache_hits_total \
    vllm:time_to_first_token_seconds_bucket vllm:inter_token_latency_seconds_bucket \
    vllm:e2e_request_latency_seconds_bucket vllm:request_queue_time_seconds_bucket; do
    grep -q "^$m{" "$dir/metrics" || { echo "FAIL metric $m missing"; fail=1; }
done

grep -Eq '^vllm:request_queue_time_seconds_count\{[^}]*\} [1-9]' "$dir/metrics" ||
    { echo "FAIL queue-time histogram observed nothing"; fail=1; }
grep -Eq '^vllm:time_to_first_token_seconds_count\{[^}]*\} [1-9]' "$dir/metrics" ||
    { echo "FAIL TTFT histogram observed nothing"; fail=1; }

kill -TERM "$pid"
wait "$pid"; rc=$?
[ "$rc" = 0 ] && echo "ok   SIGTERM exit 0" || { echo "FAIL exit status $rc after SIGTERM"; fail=1; }

# A second server: API key, two served names, and a waiting queue of zero so
# every generation request is turned away with 503 and Retry-After.
"$VLLMC" serve --port 0 --host 127.0.0.1 --api-key sekret --served-model-name alpha beta \
    --max-waiting-requests 0 --kv-cache-memory-bytes 33554432 >"$dir/out2" 2>"$dir/err2" &
pid=$!
wait_ready "$dir/err2"
expect 401 GET /v1/models
grep -q '"code":401' "$dir/body" || { echo "FAIL 401 body: $(cat "$dir/body")"; fail=1; }
got=$(curl -s -o "$dir/body" -w '%{http_code}' -H 'Authorization: Bearer sekret' "$base/v1/models")
[ "$got" = 200 ] && grep -q '"id":"alpha"' "$dir/body" && grep -q '"id":"beta"' "$dir/body" &&
    echo "ok   key accepted, served names listed" || { echo "FAIL models with key: $got $(cat "$dir/body")"; fail=1; }
got=$(curl -s -D "$dir/headers" -o "$dir/body" -w '%{http_code}' -H 'Authorization: Bearer sekret' \
    -H 'Content-Type: application/json' "$base/v1/completions" -d '{"model":"beta","prompt":"x"}')
[ "$got" = 503 ] && grep -qi '^Retry-After: 1' "$dir/headers" && echo "ok   503 with Retry-After" ||
    { echo "FAIL queue limit: $got $(cat "$dir/body")"; fail=1; }
expect 200 GET /health
kill -INT "$pid"
wait "$pid"; rc=$?
[ "$rc" = 0 ] && echo "ok   SIGINT exit 0" || { echo "FAIL exit status $rc after SIGINT"; fail=1; }
exit "$fail"
