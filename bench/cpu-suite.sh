#!/bin/bash
# The CPU benchmark suite behind bench/RESULTS.md, in one command: builds the
# random-weight models it needs (once, into MODELS), then runs `vllmc bench`
# (pp512 / tg128 with the same-run read bandwidth) on every weight type of the
# Qwen3-0.6B layer shape and `vllmc bench throughput` at several sequence
# counts, and prints one table against the llama.cpp figures of the project's
# goals (llama.cpp v0.5.0, 2 threads, same shapes, same machine kind).
#
#   bench/cpu-suite.sh [VLLMC] [MODELS]     (defaults: build/vllmc, build/models)
#   ROUNDS=3 bench/cpu-suite.sh ...          (medians over three rounds)
#
# Run it on an otherwise idle machine: every line says the load average and the
# share of its threads' wall time the process got.
set -u
VLLMC=${1:-build/vllmc}
MODELS=${2:-build/models}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-1}
PP=${PP:-512}
TG=${TG:-128}
LEN=${LEN:-128}  # prompt and output tokens of each throughput request
LOG=${LOG:-$MODELS/cpu-suite.log}
mkdir -p "$MODELS"
: >"$LOG"

model() { # NAME GEN-MODEL-ARGS... : generates MODELS/NAME.gguf unless present
    local name=$1
    shift
    [ -f "$MODELS/$name.gguf" ] || "$VLLMC" gen-model -o "$MODELS/$name.gguf" "$@" >>"$LOG" 2>&1
}
quantized() { # TYPE: MODELS/q06-TYPE.gguf from the f32 model
    [ -f "$MODELS/q06-$1.gguf" ] ||
        "$VLLMC" quantize "$MODELS/q06-f32.gguf" "$MODELS/q06-$1.gguf" --type "$1" --quiet >>"$LOG" 2>&1
}

model q06-f32 --dtype f32
model q06-f16 --dtype f16
model q06-bf16 --dtype bf16
for t in Q8_0 Q4_K_M Q4_0; do quantized $t; done
model s15m-f16 --dtype f16 --layers 6 --dim 288 --ffn 768 --heads 6 --kv-heads 6 --head-dim 48 \
    --vocab 32000 --tie-embeddings

# llama.cpp's figures (pp512, tg128) for each weight type; - where none was given.
declare -A LLAMA_PP=([bf16]=471 [Q8_0]=269 [Q4_K_M]=362 [Q4_0]=460)
declare -A LLAMA_TG=([bf16]=41.7 [f16]=38.5 [f32]=27 [Q8_0]=61 [Q4_K_M]=100 [Q4_0]=101)

ratio() { [ -n "$2" ] && [ -n "$1" ] && [ "$1" != "-" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }' || echo "-"; }

# One round runs every row once; with ROUNDS > 1 the rounds run one after
# another and each figure is the median over them (the range beside it), so a
# swing of the host during one row does not decide the table.
median() { # VALUES...: the median (mean of the middle two for an even count); - for none
    [ $# -gt 0 ] || { echo "-"; return; }
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR) printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
range() { # VALUES...: "min-max", empty for a single value
    [ $# -gt 1 ] && printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 }
        END { printf " (%s-%s)", lo, hi }'
}
figure() { # VALUES...: the median and, over several rounds, the range
    echo "$(median "$@")$(range "$@")"
}

TYPES="f32 f16 bf16 Q8_0 Q4_K_M Q4_0"
declare -A PPV TGV GBV PCTV BWV SHAREV TPV
bench_round() {
    local t out
    for t in $TYPES; do
        out=$("$VLLMC" bench -m "$MODELS/q06-$t.gguf" -p "$PP" -n "$TG" -r "$REPS" -t "$THREADS" 2>&1)
        echo "$out" >>"$LOG"
        PPV[$t]+=" $(echo "$out" | awk -F'|' '$7 ~ / pp'"$PP"' *$/ { gsub(/ /, "", $9); print $9 }')"
        TGV[$t]+=" $(echo "$out" | awk -F'|' '$7 ~ / tg'"$TG"' *$/ { gsub(/ /, "", $9); print $9 }')"
        GBV[$t]+=" $(echo "$out" | sed -n 's/^decode: .* = \([0-9.]*\) GB\/s = [0-9.]*% of the read bandwidth.*/\1/p')"
        PCTV[$t]+=" $(echo "$out" | sed -n 's/^decode: .* = [0-9.]* GB\/s = \([0-9.]*\)% of the read bandwidth.*/\1/p')"
        BWV[$t]+=" $(echo "$out" | sed -n 's/^read bandwidth: \([0-9.]*\) GB\/s.*/\1/p')"
        SHAREV[$t]+="${SHAREV[$t]:+ / }$(echo "$out" | sed -n 's/.*CPU time \/ (wall time x [0-9]* threads): //p')"
        echo "  $t: pp$PP ${PPV[$t]##* }, tg$TG ${TGV[$t]##* } tok/s" >&2
    done
}

# Throughput rows: model, KV cache dtype (auto: the engine's f32; llama.cpp's
# figures ran with its default f16 cache, so the f16 rows compare like for
# like), llama.cpp's figures at the sequence counts, the sequence counts.
TPUT_ROWS=(
    "s15m-f16 auto 618,1516,1879 1 4 16"
    "s15m-f16 f16 618,1516,1879 1 4 16"
    "q06-Q8_0 auto 54,53,131 1 4 16"
    "q06-Q8_0 f16 54,53,131 1 4 16"
    "q06-bf16 auto - 1 8 32"
)
throughput_round() { # aggregate decode tok/s of every row at each sequence count
    local row name kv bars seqs n out
    for row in "${TPUT_ROWS[@]}"; do
        read -r name kv bars seqs <<<"$row"
        for n in $seqs; do
            out=$("$VLLMC" bench throughput -m "$MODELS/$name.gguf" --num-prompts "$n" --input-len "$LEN" \
                --output-len "$LEN" --max-num-seqs "$n" -t "$THREADS" --temperature 0 --kv-cache-dtype "$kv" 2>&1)
            echo "$out" >>"$LOG"
            TPV["$name $kv $n"]+=" $(echo "$out" | sed -n 's/^Decode (all .*): \([0-9.]*\) output tokens\/s aggregate.*/\1/p')"
            echo "  $name, $kv KV cache, $n sequences: ${TPV["$name $kv $n"]##* } tok/s" >&2
        done
    done
}

for ((round = 1; round <= ROUNDS; round++)); do
    echo "round $round of $ROUNDS" >&2
    bench_round
    throughput_round
done

ROWS=()
for t in $TYPES; do
    # shellcheck disable=SC2086 # the lists split into values on purpose
    pp=$(median ${PPV[$t]}) tg=$(median ${TGV[$t]})
    ROWS+=("| $t | $(figure ${PPV[$t]}) | $(ratio "$pp" "${LLAMA_PP[$t]:-}") | $(figure ${TGV[$t]}) |\
 $(ratio "$tg" "${LLAMA_TG[$t]:-}") | $(median ${GBV[$t]}) GB/s, $(median ${PCTV[$t]})%$(range ${PCTV[$t]}) of $(median ${BWV[$t]}) GB/s |\
 ${SHAREV[$t]} |")
done
TROWS=()
for row in "${TPUT_ROWS[@]}"; do
    read -r name kv bars seqs <<<"$row"
    line="| $name, $kv KV cache |" ratios="" i=1
    for n in $seqs; do
        # shellcheck disable=SC2086
        tok=$(median ${TPV["$name $kv $n"]})
        line="$line $n: $(figure ${TPV["$name $kv $n"]})"
        bar=$(echo "$bars" | cut -d, -f$i)
        [ "$bar" != "-" ] && [ -n "$bar" ] && ratios="$ratios $n: $(ratio "$tok" "$bar")"
        i=$((i + 1))
    done
    TROWS+=("$line |$ratios |")
done
echo
echo "commit $(git -C "$(dirname "$0")" log --oneline -1 2>/dev/null | cut -c1-60)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); rounds: $ROUNDS; log: $LOG"
# The llama.cpp figures were measured on an AMD Zen 5 machine of this kind;
# on another CPU the "vs llama.cpp" columns compare across machines.
echo "cpu: $(awk -F': ' '/^model name/ { m = $2 } /^cpu family/ { f = $2 } /^model\t/ { n = $2 }
    END { print m ", family " f ", model " n }' /proc/cpuinfo), $(nproc) CPUs"
echo
echo "| weights | pp$PP tok/s | vs llama.cpp | tg$TG tok/s | vs llama.cpp | decode: bytes/s of the read bandwidth | CPU share |"
echo "| --- | ---: | ---: | ---: | ---: | --- | --- |"
printf '%s\n' "${ROWS[@]}"
echo
echo "| model | aggregate decode tok/s at N sequences ($LEN in / $LEN out, greedy) | vs llama.cpp |"
echo "| --- | --- | --- |"
printf '%s\n' "${TROWS[@]}"
