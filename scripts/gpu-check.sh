#!/bin/bash
# The GPU machine's check, in one call: builds with the CUDA backend for sm_90a,
# runs the GPU tests, op parity (also under compute-sanitizer memcheck and
# racecheck), parity against Hugging Face transformers, the roofline probe and
# the benchmarks. Logs go to $OUT (default ./gpu-out); a summary table ends
# the output. Each stage is time-boxed and a failing stage does not stop the
# next one; the exit status is 1 when any stage failed.
#
# The machine (Ubuntu 24.04, CUDA 13, gcc, cmake, PyTorch + transformers) has
# no network and lacks some build dependencies: their .deb files are carried
# in ./.deps-gpu/ (apt-get download, see below) and unpacked into
# ./.deps-gpu/root, never into /. Models and other inputs are carried in
# ./.gpu-data/ (stories260K-hf, the Qwen3 tokenizer).
#
#   apt-get download libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 \
#     libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 \
#     libmicrohttpd-dev libmicrohttpd12 nettle-dev libnettle8 pkgconf \
#     pkgconf-bin libpkgconf3 libcurl4-openssl-dev
#
# GPU_CHECK_STAGES (comma list) picks stages: deps,build,tests,ops,roofline,
# bench,hf,ab,profile,trace,serve,hf8b,q8b,sanitizer (default: all but hf8b, which writes a 16 GB
# checkpoint, and q8b, which writes one and quantizes it to Q4_K_M and Q8_0
# (GPU_CHECK_Q8B_AB=0 leaves out its byte-loading GEMV comparison);
# a machine call has 10 minutes, so split the stages over calls).
# GPU_CHECK_CPU_PARITY=0 leaves out the (informational) CPU parity runs;
# GPU_CHECK_HF_MODELS (default: qwen3-0.6b llama3-1b qwen2-0.5b stories int4)
# picks the checkpoints of the hf stage; GPU_CHECK_AB (a bash regex, default
# all) picks the ab comparisons by name. The ab stage runs the side-by-side
# comparisons behind the engine's defaults (decode attention kernels, decode
# graphs, prefill activation precision) on the 0.6B shape.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
STAGES=${GPU_CHECK_STAGES:-deps,build,tests,ops,roofline,bench,hf,ab,profile,trace,serve,sanitizer}
BUILD=$ROOT/build-gpu
VLLMC=$BUILD/vllmc
DATA=$ROOT/.gpu-data
JOBS=$(nproc)
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FAILED=0

want() { case ",$STAGES," in *",$1,"*) return 0 ;; esac; return 1; }

# stage NAME LOGFILE TIMEOUT_S CMD...: runs CMD with a time limit, appends its
# output to LOGFILE and to the terminal, and records ok/FAIL with seconds.
stage() {
    local name=$1 log=$2 limit=$3
    shift 3
    echo "=== $name: $*" | tee -a "$log"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$OUT/stage.tmp" 2>&1
    local rc=$?
    local dt=$((SECONDS - t0))
    cat "$OUT/stage.tmp" >>"$log"
    tail -n 12 "$OUT/stage.tmp"
    rm -f "$OUT/stage.tmp"
    if [ $rc -eq 0 ]; then
        printf '%-34s ok    %4ss\n' "$name" "$dt" >>"$SUMMARY"
    else
        [ $rc -eq 124 ] && rc="timeout"
        printf '%-34s FAIL  %4ss (exit %s)\n' "$name" "$dt" "$rc" >>"$SUMMARY"
        FAILED=1
    fi
}

note() { echo "$*" | tee -a "$SUMMARY"; }

# ---- dependencies: carried .deb files unpacked inside the tree ----
if want deps; then
    PREFIX=$ROOT/.deps-gpu/root
    LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX"
    for f in "$ROOT"/.deps-gpu/*.deb; do
        [ -e "$f" ] && dpkg -x "$f" "$PREFIX"
    done
    # Where the machine has a library's runtime already (only its headers are
    # missing), link against the machine's copy: other system libraries (e.g.
    # gnutls needs nettle) were built against it, not against ours.
    for dev in "$LIBDIR"/lib*.so; do
        [ -L "$dev" ] || continue
        soname=$(objdump -p "$dev" 2>/dev/null | awk '/SONAME/ {print $2}')
        # A -dev package carried without its runtime (libcurl: the machine's
        # own copy has other dependencies) leaves a dangling link: its soname
        # is the target's name up to the major version.
        [ -n "$soname" ] || soname=$(basename "$(readlink "$dev")" | sed -E 's/^(lib.*\.so\.[0-9]+).*/\1/')
        [ -n "$soname" ] || continue
        sys=$(ldconfig -p 2>/dev/null | awk -v s="$soname" '$1 == s && /x86-64/ {print $NF; exit}')
        case "$sys" in "" | "$PREFIX"/*) continue ;; esac
        rm -f "$LIBDIR/$soname" "$LIBDIR/$soname".*
        ln -sf "$sys" "$dev"
        echo "deps: $(basename "$dev") -> $sys (the machine's runtime)"
    done
    # A library that is still missing is left out of the build (its .pc goes),
    # instead of failing the link: libcurl only serves `vllmc bench serve`.
    for dev in "$LIBDIR"/lib*.so; do
        [ -L "$dev" ] && [ ! -e "$dev" ] || continue
        name=$(basename "$dev" .so)
        rm -f "$dev" "$LIBDIR/pkgconfig/$name.pc"
        note "deps: no runtime for $name on this machine; built without it"
    done
    if [ -d "$LIBDIR/pkgconfig" ]; then
        sed -i "s|^prefix=.*|prefix=$PREFIX/usr|" "$LIBDIR"/pkgconfig/*.pc
        # gnutls is only needed to link libmicrohttpd statically; the shared
        # library brings its own dependency on libgnutls.so.30.
        sed -i '/^Requires.private:/d' "$LIBDIR"/pkgconfig/libmicrohttpd.pc
    fi
fi
# The unpacked prefix serves every stage, also a later call's stages without
# `deps` (a build-gpu left by an earlier call needs its libraries at run time).
PREFIX=$ROOT/.deps-gpu/root
LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
if [ -d "$LIBDIR" ]; then
    export PKG_CONFIG_PATH=$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CPATH=$PREFIX/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if ! command -v pkg-config >/dev/null 2>&1; then
        ln -sf pkgconf "$PREFIX/usr/bin/pkg-config"
        export PATH=$PREFIX/usr/bin:$PATH
    fi
    ldconfig -p 2>/dev/null | grep -q 'libgnutls.so.30' ||
        note "warning: libgnutls.so.30 not found; libmicrohttpd needs it at run time"
fi

{
    echo "=== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    nvcc --version | tail -2
    gcc --version | head -1
    cmake --version | head -1
    pkg-config --modversion jansson libpcre2-8 libutf8proc libmicrohttpd
    git -C "$ROOT" log --oneline -1 2>/dev/null
} 2>&1 | tee "$OUT/gpu-check.log"

# ---- build ----
if want build; then
    stage "build (sm_90a, -Werror)" "$OUT/gpu-check.log" 480 bash -c "
        cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DVLLMC_CUDA=ON \
              -DCMAKE_CUDA_ARCHITECTURES=90a -DVLLMC_WERROR=ON >/dev/null &&
        cmake --build '$BUILD' -j $JOBS --target vllmc_gpu"
    # This machine's gcc is newer than CI's; a warning only it raises should
    # not hide the GPU results, so retry without -Werror (the log keeps both).
    if [ ! -x "$VLLMC" ]; then
        stage "build (sm_90a, warnings allowed)" "$OUT/gpu-check.log" 480 bash -c "
            cmake -S '$ROOT' -B '$BUILD' -DVLLMC_WERROR=OFF >/dev/null &&
            cmake --build '$BUILD' -j $JOBS --target vllmc_gpu"
    fi
fi

# ---- tests with the gpu label and the backend's unit test ----
if want tests; then
    stage "ctest -L gpu, test_cuda_backend" "$OUT/gpu-check.log" 300 bash -c "
        ctest --test-dir '$BUILD' -L gpu --output-on-failure && '$BUILD/test_cuda_backend'"
fi

# ---- op parity against cpu-ref ----
if want ops; then
    stage "op-parity --device cuda" "$OUT/op-parity.log" 300 "$VLLMC" op-parity --device cuda
    grep -q "provider=cuda" "$OUT/op-parity.log" || note "op-parity: no cuda provider was checked"
    # One token's Q4_K rows take the lane-item GEMV by default: the direct
    # kernel it replaces stays checked.
    stage "op-parity --op matmul, VLLMC_CUDA_QGEMV_LANE=0" "$OUT/op-parity.log" 120 \
        env VLLMC_CUDA_QGEMV_LANE=0 "$VLLMC" op-parity --device cuda --op matmul
    # The quantized decode GEMV's largest error per weight type (bar 5e-4).
    grep "provider=cuda-qgemv nmse=" "$OUT/op-parity.log" |
        sed -E 's/.*dtype=([^ ]*) .*nmse=([^ ]*).*/\1 \2/' |
        awk '{if (!($1 in m) || $2 + 0 > m[$1] + 0) m[$1] = $2}
             END {for (t in m) o = o (o == "" ? "" : ", ") t " " m[t];
                  if (o != "") print "  cuda-qgemv max nmse: " o}' >>"$SUMMARY"
    # The quantized GGUF models of shared/testdata/quant/models (carried when
    # copied to .gpu-data/quant-models) against llama.cpp's recorded outputs:
    # the k-quants, Q4_0, Q8_0 and IQ4_XS through the CUDA GEMV and prefill.
    for m in "$DATA"/quant-models/*.gguf; do
        [ -f "$m" ] || continue
        n=$(basename "$m" .gguf)
        for batch in 1 8; do
            stage "parity $n cuda batch $batch" "$OUT/quant-parity.log" 120 \
                "$VLLMC" parity --model "$m" --reference "${m%.gguf}.refs.json" \
                --pass default --device cuda --batch $batch
            grep "^parity:" "$OUT/quant-parity.log" | tail -1 | sed "s|^|  $n cuda b$batch |" >>"$SUMMARY"
        done
    done
fi

# ---- roofline probe: copy and read bandwidth, bf16 GEMM rate (PyTorch) ----
if want roofline; then
    stage "roofline probe (torch)" "$OUT/bench.log" 120 python3 - <<'EOF'
import torch
torch.backends.cuda.matmul.allow_tf32 = False
def bench(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    ts = []
    for i in range(n):
        ev[2*i].record(); fn(); ev[2*i+1].record()
    torch.cuda.synchronize()
    ts = sorted(ev[2*i].elapsed_time(ev[2*i+1]) for i in range(n))
    return ts[len(ts) // 2] / 1e3
n = 1 << 30  # 4 GiB of f32
a = torch.rand(n, device="cuda"); b = torch.empty_like(a)
t = bench(lambda: b.copy_(a))
print(f"roofline copy_gbps={2 * 4 * n / t / 1e9:.0f} (read+write, 4 GiB)")
t = bench(lambda: a.sum())
print(f"roofline read_gbps={4 * n / t / 1e9:.0f} (sum over 4 GiB)")
del a, b
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = bench(lambda: x @ y, 10)
print(f"roofline bf16_tflops={2 * 8192**3 / t / 1e12:.0f} (8192^3, random)")
EOF
fi

# ---- benchmarks ----
if want bench; then
    stage "bench-ops gemv+crossover+attention" "$OUT/bench.log" 240 \
        "$VLLMC" bench-ops --device cuda --section gemv --iters 50
    stage "bench-ops crossover" "$OUT/bench.log" 240 \
        "$VLLMC" bench-ops --device cuda --section crossover --iters 50
    stage "bench-ops attention" "$OUT/bench.log" 120 \
        "$VLLMC" bench-ops --device cuda --section attention --iters 50
    stage "bench-ops decode (synthetic step)" "$OUT/bench.log" 300 \
        "$VLLMC" bench-ops --device cuda --section decode --iters 20
    if [ -d "$DATA/qwen3-0.6b-random" ]; then
        stage "generate --device cuda (0.6B, 128 tokens)" "$OUT/bench.log" 120 \
            "$VLLMC" generate --model "$DATA/qwen3-0.6b-random" --device cuda \
            --prompt-ids 151643,1000,2000,3000 -n 128 --print-ids
    fi
fi

# ---- parity with Hugging Face transformers ----
# parity_runs NAME DEVICE:BATCH...: vllmc parity of NAME on each device at each batch.
parity_runs() {
    local m=$1 run dev batch
    shift
    for run in "$@"; do
        dev=${run%:*} batch=${run#*:}
        [ "$dev" = cpu ] && [ "${GPU_CHECK_CPU_PARITY:-1}" = 0 ] && continue
        stage "parity $m $dev batch $batch" "$OUT/hf-parity.log" 300 \
            "$VLLMC" parity --model "$DATA/$m" --reference "$DATA/$m.refs.json" \
            --pass default --device $dev --batch $batch
        grep "^parity:" "$OUT/hf-parity.log" | tail -1 | sed "s|^|  $m $dev b$batch |" >>"$SUMMARY"
    done
}

# make_model SHAPE NAME: a random-weight checkpoint of SHAPE with its references.
make_model() {
    stage "hf: make $2 + references" "$OUT/hf-parity.log" 400 \
        python3 "$ROOT/tools/reference/hf_reference.py" make "$1" "$DATA/$2" \
        --refs "$DATA/$2.refs.json"
    # Qwen-vocabulary shapes get the real Qwen3 tokenizer (the server needs one).
    case $1 in qwen*)
        [ -f "$DATA/qwen3-tokenizer/tokenizer.json" ] && cp "$DATA"/qwen3-tokenizer/* "$DATA/$2"/ ;;
    esac
}

HF_MODELS=" ${GPU_CHECK_HF_MODELS:-qwen3-0.6b llama3-1b qwen2-0.5b stories int4} "
hf_want() { case $HF_MODELS in *" $1 "*) return 0 ;; esac; return 1; }
if want hf; then
    # The CPU runs at batch 8 only for the large vocabularies (time).
    for shape in qwen3-0.6b llama3-1b qwen2-0.5b; do
        hf_want $shape || continue
        make_model $shape $shape-random
        parity_runs $shape-random cuda:1 cuda:8 cpu:8
    done
    if hf_want stories; then
        stage "hf: references stories260K-hf" "$OUT/hf-parity.log" 300 \
            python3 "$ROOT/tools/reference/hf_reference.py" refs "$DATA/stories260K-hf" \
            "$DATA/stories260K-hf.refs.json"
        parity_runs stories260K-hf cuda:1 cuda:8 cpu:1 cpu:8
    fi
    # AWQ/GPTQ INT4 checkpoints against transformers on their dequantized weights.
    if hf_want int4; then
        stage "hf: make int4 AWQ/GPTQ checkpoints + references" "$OUT/hf-parity.log" 400 \
            python3 "$ROOT/tools/reference/int4_reference.py" "$DATA"
        for m in int4-awq-g128 int4-awq-g64 int4-gptq-g128-act int4-gptq-gall; do
            [ -d "$DATA/$m" ] && parity_runs $m cuda:1 cuda:8 cpu:1 cpu:8
        done
    fi
fi

# ---- the engine's own benchmarks on the Qwen3-0.6B-shaped checkpoint ----
if want hf && [ -d "$DATA/qwen3-0.6b-random" ]; then
    stage "vllmc bench pp512/tg128 cuda (0.6B)" "$OUT/bench.log" 150 \
        "$VLLMC" bench --model "$DATA/qwen3-0.6b-random" --device cuda -p 512 -n 128 -r 3
    # The default f32 cache, then f16 (llama.cpp's default, which its
    # aggregate-decode bar ran with). Where the engine thread's decode step
    # goes (batch building and upload, launch, waiting) beside the device's
    # own time, into the summary.
    for kv in f32 f16; do
        from=$(($(wc -l <"$OUT/bench.log" 2>/dev/null || echo 0) + 1))
        stage "vllmc bench throughput cuda (0.6B, 64x512/128, $kv cache)" "$OUT/bench.log" 150 \
            "$VLLMC" bench throughput --model "$DATA/qwen3-0.6b-random" --device cuda \
            --num-prompts 64 --input-len 512 --output-len 128 --max-num-seqs 64 --kv-cache-dtype $kv
        tail -n +"$from" "$OUT/bench.log" | grep "^Decode (all\|^Decode step" | cut -c1-200 |
            sed "s|^|  0.6B 64 seqs, $kv cache: |" >>"$SUMMARY"
    done
fi

# ---- side by side: the choices behind the engine's defaults ----
# ab NAME ENV CMD...: CMD once with ENV (VAR=VALUE ...) set, into ab.log.
ab() {
    local name=$1 envs=$2
    shift 2
    [[ "$name" =~ ${GPU_CHECK_AB:-.} ]] || return 0
    local from
    from=$(($(wc -l <"$OUT/ab.log" 2>/dev/null || echo 0) + 1))
    stage "ab: $name [$envs]" "$OUT/ab.log" 150 env $envs "$@"
    tail -n +"$from" "$OUT/ab.log" | grep "tok/s\|  pp512 \|  tg128 \|^op=attention decode\|graphs:\|^parity:\|^op-parity:\|Decode (all\|^Engine step:" |
        grep -v "^| model\|^| ---" | sed "s|^|  [${envs:-$name}] |" >>"$SUMMARY"
}
if want ab; then
    for mode in 1 2 3 4; do
        ab "decode attention kernel" "VLLMC_CUDA_DECODE_ATTENTION=$mode" \
            "$VLLMC" bench-ops --device cuda --section attention --iters 50
    done
    for split in 512,2 256,4 128,8; do
        ab "decode attention splits" "VLLMC_CUDA_DECODE_SPLIT=$split" \
            "$VLLMC" bench-ops --device cuda --section attention --iters 50
    done
    # The direct GEMV (default, 2) against the packed (1) and the
    # byte-loading (0) ones on quantized rows.
    for q in 0 1; do
        ab "op-parity, quantized GEMV $q" "VLLMC_CUDA_QGEMV=$q" \
            "$VLLMC" op-parity --device cuda --op matmul
    done
    for q in 0 1 2; do
        from=$(($(wc -l <"$OUT/ab.log" 2>/dev/null || echo 0) + 1))
        ab "quantized GEMV (1 = packed, 2 = direct)" "VLLMC_CUDA_QGEMV=$q" \
            "$VLLMC" bench-ops --device cuda --section gemv --iters 50
        tail -n +"$from" "$OUT/ab.log" | grep -i "^op=matmul shape=8b.*wtype=i*q" |
            sed -E "s/^op=matmul shape=([^ ]*) m=([0-9]*) .*wtype=([^ ]*) provider=[^ ]* us=([^ ]*) gbps=([^ ]*).*/  [VLLMC_CUDA_QGEMV=$q] \\3 \\1 m=\\2 \\4 us \\5 GB\/s/" >>"$SUMMARY"
    done
    ab "op-parity, GEMV one warp per row" "VLLMC_CUDA_GEMV_WARP=1" \
        "$VLLMC" op-parity --device cuda --op matmul
    for w in 0 1; do
        ab "GEMV one warp per row" "VLLMC_CUDA_GEMV_WARP=$w" \
            "$VLLMC" bench-ops --device cuda --section gemv --iters 50
    done
    if [ -d "$DATA/qwen3-0.6b-random" ]; then
        # The commands the pairs below repeat, on the transformers checkpoint.
        M06="$DATA/qwen3-0.6b-random"
        TG128=("$VLLMC" bench --model "$M06" --device cuda -p 0 -n 128 -r 3)
        PP512=("$VLLMC" bench --model "$M06" --device cuda -p 512 -n 0 -r 3)
        TP=("$VLLMC" bench throughput --model "$M06" --device cuda --input-len 512 --output-len 128)
        TP64=("${TP[@]}" --num-prompts 64 --max-num-seqs 64)
        TP1=("${TP[@]}" --num-prompts 4 --max-num-seqs 1)
        for w in 0 1; do
            ab "GEMV one warp per row, 0.6B tg128" \
                "VLLMC_CUDA_GEMV_WARP=$w VLLMC_CUDA_GRAPHS=1" "${TG128[@]}"
        done
        # Programmatic dependent launch (default on sm_90) against plain
        # launches and without the GEMV's L2 prefetch; the short-split decode
        # attention (default) against the pipelined kernel at 32-key splits.
        for e in VLLMC_CUDA_PDL=0 VLLMC_CUDA_PDL=1 VLLMC_CUDA_PDL_PREFETCH_MB=0 \
            "VLLMC_CUDA_DECODE_ATTENTION=2 VLLMC_CUDA_DECODE_SPLIT=128,2,32"; do
            ab "launches and decode attention, 0.6B tg128" "$e" "${TG128[@]}"
        done
        for g in 0 1; do
            ab "decode graphs, 0.6B tg128" "VLLMC_CUDA_GRAPHS=$g" "${TG128[@]}"
            ab "decode graphs, 0.6B 64 x 512/128" "VLLMC_CUDA_GRAPHS=$g" "${TP64[@]}"
        done
        # Asynchronous scheduling (default) against reading each step's tokens first.
        for a in no-async async; do
            ab "async scheduling, 0.6B 64 x 512/128" \
                "VLLMC_AB_SCHEDULING=$a" "${TP64[@]}" --$a-scheduling
            ab "async scheduling, 0.6B 1 x 512/128" \
                "VLLMC_AB_SCHEDULING=$a" "${TP1[@]}" --$a-scheduling
        done
        for f in 0 1; do
            ab "fused q|k|v and gate|up projections, 0.6B tg128" "VLLMC_FUSE=$f" "${TG128[@]}"
        done
        # Sampling in vocabulary chunks (default) against one block a row,
        # at 64 sequences and at one (temperature 1, bench throughput's default).
        for sc in 0 1; do
            ab "sampling in chunks, 0.6B 64 x 512/128" "VLLMC_CUDA_SAMPLE_CHUNKS=$sc" "${TP64[@]}"
            ab "sampling in chunks, 0.6B 1 x 512/128" "VLLMC_CUDA_SAMPLE_CHUNKS=$sc" "${TP1[@]}"
        done
        # The norm inside the q|k|v and gate|up decode GEMVs (norm_matmul,
        # default) against the norm kernels before them.
        for nm in 0 1; do
            ab "norm inside the decode GEMVs, 0.6B tg128" "VLLMC_CUDA_NORM_MATMUL=$nm" "${TG128[@]}"
        done
        for split in 512,2 128,8; do
            ab "decode attention splits, 0.6B 64 x 512/128" "VLLMC_CUDA_DECODE_SPLIT=$split" \
                "${TP64[@]}"
        done
        for x in 0 1; do
            ab "bf16 activations, 0.6B pp512" "VLLMC_CUDA_BF16_ACTIVATIONS=$x" "${PP512[@]}"
        done
        ab "hi + lo activations, parity 0.6B b8" "VLLMC_CUDA_BF16_ACTIVATIONS=0" \
            "$VLLMC" parity --model "$M06" \
            --reference "$M06.refs.json" --pass default --device cuda --batch 8
        # bf16 weights rewritten as f16 (--dtype float16): one f16 term.
        ab "f16 weights, 0.6B pp512" "" "${PP512[@]}" --dtype float16
        ab "f16 weights, parity 0.6B b8" "" "$VLLMC" parity --model "$M06" \
            --reference "$M06.refs.json" --pass default --device cuda --batch 8 --dtype float16
        # Prefill attention on CUDA cores instead of tensor cores (the default
        # run is the bench stage's pp512).
        ab "no tensor-core prefill attention, 0.6B pp512" \
            "VLLMC_OP_PROVIDER_DISABLE=cuda-attn-prefill-tc,cuda-attn-prefill-tc-ldsm" "${PP512[@]}"
    fi
fi

# ---- a kernel profile of 0.6B batch-1 decode (nsys, when the machine has it) ----
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if want profile && [ -n "$NSYS" ] && [ -d "$DATA/qwen3-0.6b-random" ]; then
    stage "nsys: 0.6B tg32 kernels" "$OUT/profile.log" 200 bash -c "
        '$NSYS' profile --cuda-graph-trace=node -o '$OUT/tg32' --force-overwrite true \
            '$VLLMC' bench --model '$DATA/qwen3-0.6b-random' --device cuda -p 0 -n 32 -r 1 >/dev/null &&
        '$NSYS' stats --report cuda_gpu_kern_sum --format csv '$OUT/tg32.nsys-rep' | head -40"
    rm -f "$OUT"/tg32.nsys-rep "$OUT"/tg32.sqlite
fi
# Without nsys: Nsight Compute's per-kernel device time over the synthetic
# decode step of bench-ops (eager), with the clocks and caches left as they
# are. The summary sums kernel time per step by kernel name; the step's wall
# time in the same log shows what launches and gaps add.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if want profile && [ -z "$NSYS" ] && [ -n "$NCU" ]; then
    for shape in qwen3-0.6b qwen3-8b; do
        stage "ncu: $shape batch-1 decode step kernels" "$OUT/profile.log" 300 bash -c "
            '$NCU' --clock-control none --cache-control none --metrics gpu__time_duration.sum \
                --csv --log-file '$OUT/ncu-$shape.csv' \
                '$VLLMC' bench-ops --device cuda --section decode --model $shape --batch 1 \
                --iters 3 >/dev/null &&
            python3 '$ROOT/scripts/ncu-summary.py' '$OUT/ncu-$shape.csv' 4"
    done
fi

# ---- the kernel timeline of 0.6B batch-1 decode replayed from graphs (CUPTI) ----
TRACE_LIB=$BUILD/libkernel_trace.so
if want trace && [ -f "$TRACE_LIB" ] && [ -d "$DATA/qwen3-0.6b-random" ]; then
    for p in 1 0; do
        stage "trace: 0.6B tg128 kernels, VLLMC_CUDA_PDL=$p" "$OUT/trace.log" 120 \
            env VLLMC_CUDA_PDL=$p CUDA_INJECTION64_PATH="$TRACE_LIB" VLLMC_TRACE_OUT="$OUT/trace-pdl$p.txt" \
            "$VLLMC" bench --model "$DATA/qwen3-0.6b-random" --device cuda -p 0 -n 128 -r 1
        head -1 "$OUT/trace-pdl$p.txt" 2>/dev/null | sed "s|^|  [VLLMC_CUDA_PDL=$p] |" >>"$SUMMARY"
    done
    # 64 sequences decoding (f16 cache): the graph's kernels and the time
    # between one step's graph and the next (sampling, copies, waiting for
    # the host), with the copies in the timeline.
    stage "trace: 0.6B 64x512/128 decode kernels" "$OUT/trace.log" 150 \
        env CUDA_INJECTION64_PATH="$TRACE_LIB" VLLMC_TRACE_OUT="$OUT/trace-64seq.txt" \
        "$VLLMC" bench throughput --model "$DATA/qwen3-0.6b-random" --device cuda \
        --num-prompts 64 --input-len 512 --output-len 128 --max-num-seqs 64 --kv-cache-dtype f16
    head -2 "$OUT/trace-64seq.txt" 2>/dev/null | sed "s|^|  [64 seqs] |" >>"$SUMMARY"
fi

# ---- serving: start-up time and vllmc bench serve (512 in, 128 out, 64 in flight) ----
BENCH_SERVE="--dataset-name random --random-input-len 512 --random-output-len 128
    --ignore-eos --max-concurrency 64 --num-prompts 128 --num-warmups 4"
if want serve && [ -d "$DATA/qwen3-0.6b-random" ]; then
    stage "serve + bench serve cuda (0.6B)" "$OUT/bench.log" 300 env SERVE_LOG="$OUT/serve-0.6b.log" \
        bash "$ROOT/scripts/serve-bench.sh" "$VLLMC" "$DATA/qwen3-0.6b-random" cuda 18080 $BENCH_SERVE
fi

# ---- the Qwen3-8B shape: parity, decode/prefill, throughput, start-up, serving ----
if want hf8b; then
    make_model qwen3-8b qwen3-8b-random
    parity_runs qwen3-8b-random cuda:1 cuda:8
    stage "vllmc bench pp512/tg128 cuda (8B)" "$OUT/bench.log" 200 \
        "$VLLMC" bench --model "$DATA/qwen3-8b-random" --device cuda -p 512 -n 128 -r 3
    for kv in f32 f16; do
        stage "vllmc bench throughput cuda (8B, 64x512/128, $kv cache)" "$OUT/bench.log" 200 \
            "$VLLMC" bench throughput --model "$DATA/qwen3-8b-random" --device cuda \
            --num-prompts 64 --input-len 512 --output-len 128 --max-num-seqs 64 --kv-cache-dtype $kv
    done
    stage "serve + bench serve cuda (8B)" "$OUT/bench.log" 300 env SERVE_LOG="$OUT/serve-8b.log" \
        bash "$ROOT/scripts/serve-bench.sh" "$VLLMC" "$DATA/qwen3-8b-random" cuda 18081 $BENCH_SERVE
fi

# ---- the Qwen3-8B shape quantized: Q4_K_M and Q8_0 batch-1 decode against the read roofline ----
# A random-weight model of the 8B layer shapes (Llama layout, 151936 vocabulary)
# written by gen-model as bf16 GGUF (16 GB) and converted by vllmc quantize;
# tg128's weight bytes per token (bench's decode: line) over the roofline
# probe's read bandwidth (4385 GB/s when the roofline stage did not run), then
# the same decode with the byte-loading GEMV (VLLMC_CUDA_QGEMV=0).
if want q8b; then
    Q8B=$DATA/q8b
    mkdir -p "$Q8B"
    read_gbps=$(grep -h "^roofline read_gbps=" "$OUT/bench.log" 2>/dev/null | tail -1 | sed 's/^roofline read_gbps=\([0-9]*\).*/\1/')
    [ -n "$read_gbps" ] || read_gbps=4385
    if [ ! -f "$Q8B/Q4_K_M.gguf" ] || [ ! -f "$Q8B/Q8_0.gguf" ]; then
        stage "q8b: gen-model 8B shape, bf16" "$OUT/q8b.log" 300 \
            "$VLLMC" gen-model -o "$Q8B/bf16.gguf" --dtype bf16 --layers 36 --dim 4096 \
            --ffn 12288 --heads 32 --kv-heads 8 --head-dim 128 --vocab 151936
        for t in Q4_K_M Q8_0; do
            stage "q8b: quantize $t" "$OUT/q8b.log" 300 \
                "$VLLMC" quantize "$Q8B/bf16.gguf" "$Q8B/$t.gguf" --type $t --quiet
        done
        # The bf16 source itself: the 8B shape's decode and prefill without
        # the transformers checkpoint of the hf8b stage (random weights).
        from=$(($(wc -l <"$OUT/q8b.log" 2>/dev/null || echo 0) + 1))
        stage "q8b: bench BF16 pp512/tg128 cuda (8B)" "$OUT/q8b.log" 200 \
            "$VLLMC" bench --model "$Q8B/bf16.gguf" --device cuda -p 512 -n 128 -r 3
        tail -n +"$from" "$OUT/q8b.log" | grep "  pp512 \|  tg128 \|^decode:" | sed "s|^|  q8b BF16 |" >>"$SUMMARY"
        from=$(($(wc -l <"$OUT/q8b.log" 2>/dev/null || echo 0) + 1))
        stage "q8b: bench throughput BF16 cuda (8B, 64x512/128)" "$OUT/q8b.log" 200 \
            "$VLLMC" bench throughput --model "$Q8B/bf16.gguf" --device cuda \
            --num-prompts 64 --input-len 512 --output-len 128 --max-num-seqs 64
        tail -n +"$from" "$OUT/q8b.log" | grep "^Decode (all\|^Engine step" | sed "s|^|  q8b BF16 |" >>"$SUMMARY"
        rm -f "$Q8B/bf16.gguf"
    fi
    for t in Q4_K_M Q8_0; do
        [ -f "$Q8B/$t.gguf" ] || continue
        from=$(($(wc -l <"$OUT/q8b.log" 2>/dev/null || echo 0) + 1))
        stage "q8b: bench $t pp512/tg128 cuda (8B)" "$OUT/q8b.log" 240 \
            "$VLLMC" bench --model "$Q8B/$t.gguf" --device cuda -p 512 -n 128 -r 3
        tail -n +"$from" "$OUT/q8b.log" | grep "  pp512 \|  tg128 " | sed "s|^|  q8b $t |" >>"$SUMMARY"
        tail -n +"$from" "$OUT/q8b.log" | grep "^decode:" | tail -1 |
            awk -v t=$t -v r="$read_gbps" '{g = $(NF - 1); printf "  q8b %s tg128: %s MB a token, %.0f GB/s = %.1f%% of the %s GB/s read roofline\n", t, $2, g, 100 * g / r, r}' |
            tee -a "$SUMMARY"
        [ "${GPU_CHECK_Q8B_AB:-1}" = 1 ] || continue
        from=$(($(wc -l <"$OUT/q8b.log" 2>/dev/null || echo 0) + 1))
        stage "q8b: bench $t tg128 cuda, byte-loading GEMV" "$OUT/q8b.log" 200 \
            env VLLMC_CUDA_QGEMV=0 "$VLLMC" bench --model "$Q8B/$t.gguf" --device cuda -p 0 -n 128 -r 3
        tail -n +"$from" "$OUT/q8b.log" | grep "^decode:" | tail -1 |
            awk -v t=$t -v r="$read_gbps" '{g = $(NF - 1); printf "  [VLLMC_CUDA_QGEMV=0] q8b %s tg128: %.0f GB/s = %.1f%% of the read roofline\n", t, g, 100 * g / r}' |
            tee -a "$SUMMARY"
    done
fi

# ---- compute-sanitizer: memcheck over every op, racecheck over the shared-memory kernels ----
if want sanitizer; then
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    stage "compute-sanitizer memcheck" "$OUT/sanitizer.log" 400 \
        "$SAN" --tool memcheck --leak-check full --error-exitcode 3 "$VLLMC" op-parity --device cuda
    for op in attention matmul add_rmsnorm; do
        stage "compute-sanitizer racecheck $op" "$OUT/sanitizer.log" 200 \
            "$SAN" --tool racecheck --error-exitcode 3 "$VLLMC" op-parity --device cuda --op $op
    done
fi

# ---- the table, last ----
{
    echo
    echo "==================== gpu-check summary ===================="
    cat "$SUMMARY"
    echo "---- figures ----"
    grep -h "^roofline" "$OUT/bench.log" 2>/dev/null
    grep -h "^op=matmul shape=8b\.\(down\|gate_up\|lm_head\) m=1 .*wtype=bf16" "$OUT/bench.log" 2>/dev/null
    grep -hi "^op=matmul shape=8b\..* wtype=i*q" "$OUT/bench.log" 2>/dev/null
    grep -h "^crossover" "$OUT/bench.log" 2>/dev/null | awk '{print $2, $3, $6}' | paste -sd' ' | fold -w 160
    grep -h "^op=attention" "$OUT/bench.log" 2>/dev/null | sed 's/heads=.*provider=[^ ]* //'
    grep -h "^decode model\|^prefill model" "$OUT/bench.log" 2>/dev/null
    grep -h "tok/s\|throughput" "$OUT/bench.log" 2>/dev/null | grep -v "^op=\|^decode\|^prefill" | tail -16
    grep -h "^startup:" "$OUT/bench.log" 2>/dev/null
    grep -h "decode:.*tok/s" "$OUT/bench.log" 2>/dev/null | tail -1
    grep -h "^op-parity:" "$OUT/op-parity.log" 2>/dev/null
    grep -h "ERROR SUMMARY" "$OUT/sanitizer.log" 2>/dev/null
} | tee -a "$OUT/gpu-check.log"
exit $FAILED
