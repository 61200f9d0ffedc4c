// The CPU backend: host memory, a worker pool, and the one table of CPU op
// providers. CPU features are detected once when the table is built; the
// providers' gates then look only at the call.
#include "backend/cpu/cpu_backend.h"

#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backend/backend_impl.h"
#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/blas/blas.h"
#include "backend/cpu/quant/int4g.h"
#include "backend/cpu/quant/qgemm.h"
#include "backend/cpu/quant/qmatmul.h"
#include "backend/cpu/ref/ref.h"
#include "core/alloc.h"

// What a provider needs from the CPU before it may be listed.
enum cpu_need {
    CPU_NEED_NONE,
    CPU_NEED_AVX2,        // AVX2 + FMA + F16C
    CPU_NEED_AVX512,      // the above + AVX-512 F/BW/VL
    CPU_NEED_AVX512_VNNI, // the above + AVX-512 VNNI
    CPU_NEED_AVX512_BF16, // AVX512 + AVX512_BF16
    CPU_NEED_AMX_BF16,    // AVX512 + AVX512_BF16 + AMX-TILE + AMX-BF16, leave granted
};

struct cpu_provider_entry {
    const struct op_provider *provider;
    enum cpu_need need;
};

// Every CPU provider. Dispatch picks by priority, then name (op_registry.c).
static const struct cpu_provider_entry cpu_provider_table[] = {
    // Reference implementations, priority 0: the ground truth, always present.
    {&cpu_ref_embedding, CPU_NEED_NONE},
    {&cpu_ref_rmsnorm, CPU_NEED_NONE},
    {&cpu_ref_add_rmsnorm, CPU_NEED_NONE},
    {&cpu_ref_matmul, CPU_NEED_NONE},
    {&cpu_ref_rope, CPU_NEED_NONE},
    {&cpu_ref_qk_norm_rope, CPU_NEED_NONE},
    {&cpu_ref_silu_mul, CPU_NEED_NONE},
    {&cpu_ref_matmul_silu_mul, CPU_NEED_NONE},
    {&cpu_ref_norm_matmul, CPU_NEED_NONE},
    {&cpu_ref_add, CPU_NEED_NONE},
    {&cpu_ref_kv_store, CPU_NEED_NONE},
    {&cpu_ref_qkv_rope_store, CPU_NEED_NONE},
    {&cpu_ref_attention, CPU_NEED_NONE},
    {&cpu_ref_select_ids, CPU_NEED_NONE},
    // AVX2 + FMA + F16C, priority 50: batch-invariant (fixed reduction order per row).
    {&cpu_avx2_matmul, CPU_NEED_AVX2},
    {&cpu_avx2_rmsnorm, CPU_NEED_AVX2},
    {&cpu_avx2_add_rmsnorm, CPU_NEED_AVX2},
    {&cpu_avx2_silu_mul, CPU_NEED_AVX2},
    {&cpu_avx2_rope, CPU_NEED_AVX2},
    {&cpu_avx2_qk_norm_rope, CPU_NEED_AVX2},
    {&cpu_avx2_qkv_rope_store, CPU_NEED_AVX2},
    {&cpu_avx2_kv_store, CPU_NEED_AVX2},
    {&cpu_avx2_attention, CPU_NEED_AVX2},
    // AVX-512 F/BW/VL, priority 60, where 16 lanes and masked tails win.
    {&cpu_avx512_matmul, CPU_NEED_AVX512},
    {&cpu_avx512_attention, CPU_NEED_AVX512},
    // bf16 weights with bf16 dot products (x rounded to bf16, a BF16 model's
    // own precision), priority 65: the default for bf16 weights (see its file).
    {&cpu_avx512bf16_matmul, CPU_NEED_AVX512_BF16},
    // The same on AMX tiles, priority 66, where the CPU has them (see its file).
    {&cpu_amx_bf16_matmul, CPU_NEED_AMX_BF16},
#ifdef VLLMC_HAVE_OPENBLAS
    // OpenBLAS sgemm, priority 40, m >= CPU_BLAS_MIN_M only: not batch-invariant,
    // so it ranks below the kernels above and serves when they are disabled.
    {&cpu_blas_matmul, CPU_NEED_NONE},
#endif
    // Quantized weights with 8-bit activations.
    {&cpu_q_avx2_matmul, CPU_NEED_AVX2},
    {&cpu_q_avx512_matmul, CPU_NEED_AVX512_VNNI},
    // Q8_0, Q4_0 and Q4_K with 16 tokens in the lanes (priority 75).
    {&cpu_qgemm_avx512_matmul, CPU_NEED_AVX512_VNNI},
    // AWQ/GPTQ int4g weights, the same 8-bit activation driver.
    {&cpu_int4g_avx2_matmul, CPU_NEED_AVX2},
    {&cpu_int4g_avx512_matmul, CPU_NEED_AVX512_VNNI},
};

#define CPU_N_TABLE (sizeof cpu_provider_table / sizeof cpu_provider_table[0])

static struct cpu_features features;
static const struct op_provider *enabled_providers[CPU_N_TABLE];
static size_t n_enabled_providers;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
// F16C through CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has
// no "f16c" before version 15, so ask the processor directly.
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// The AMD family, 0 on other vendors: the base family plus the extended one
// (CPUID leaf 1, EAX bits 8-11 and 20-27). Family 19h (Zen 3 and Zen 4; only
// Zen 4 has AVX-512) executes 512-bit operations in two 256-bit halves;
// family 1Ah (Zen 5) has full-width units.
static unsigned cpu_amd_family(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != signature_AMD_ebx || d != signature_AMD_edx ||
        c != signature_AMD_ecx || !__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned family = (a >> 8) & 0xf;
    if (family == 0xf)
        family += (a >> 20) & 0xff;
    return family;
}

// AMX-TILE (CPUID leaf 7, EDX bit 24) and the kernel's leave for this
// process to use the 8 KiB tile state: Linux asks for it once (arch_prctl
// ARCH_REQ_XCOMP_PERM of XFEATURE_XTILEDATA); without it the first tile
// instruction faults. *bf16 and *int8: AMX-BF16 and AMX-INT8 (bits 22, 25).
static bool cpu_amx_usable(bool *bf16, bool *int8)
{
    unsigned a, b, c, d;
    *bf16 = *int8 = false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)))
        return false;
#ifdef __linux__
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
        return false;
    *bf16 = d & (1u << 22);
    *int8 = d & (1u << 25);
    return true;
#else
    return false;
#endif
}
#endif

static void cpu_table_build(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    features.avx2 = __builtin_cpu_supports("avx2");
    features.fma = __builtin_cpu_supports("fma");
    features.f16c = cpu_has_f16c();
    features.avx512f = __builtin_cpu_supports("avx512f");
    features.avx512bw = __builtin_cpu_supports("avx512bw");
    features.avx512vl = __builtin_cpu_supports("avx512vl");
    features.avx512vnni = __builtin_cpu_supports("avx512vnni");
    features.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    unsigned amd_family = cpu_amd_family();
    features.avx512_split = features.avx512f && amd_family == 0x19;
    features.amd_zen5 = amd_family == 0x1a;
    bool amx_bf16, amx_int8;
    if (cpu_amx_usable(&amx_bf16, &amx_int8)) {
        features.amx_bf16 = features.avx512bf16 && amx_bf16;
        features.amx_int8 = features.avx512vnni && amx_int8;
    }
#endif
    bool has_avx2 = features.avx2 && features.fma && features.f16c;
    bool has_avx512 = has_avx2 && features.avx512f && features.avx512bw && features.avx512vl;
    for (size_t i = 0; i < CPU_N_TABLE; i++) {
        enum cpu_need need = cpu_provider_table[i].need;
        if ((need == CPU_NEED_AVX2 && !has_avx2) || (need == CPU_NEED_AVX512 && !has_avx512) ||
            (need == CPU_NEED_AVX512_VNNI && !(has_avx512 && features.avx512vnni)) ||
            (need == CPU_NEED_AVX512_BF16 && !(has_avx512 && features.avx512bf16)) ||
            (need == CPU_NEED_AMX_BF16 && !(has_avx512 && features.amx_bf16)))
            continue;
        enabled_providers[n_enabled_providers++] = cpu_provider_table[i].provider;
    }
}

const struct cpu_features *cpu_features_get(void)
{
    pthread_once(&table_once, cpu_table_build);
    return &features;
}

const struct op_provider *const *cpu_providers(size_t *n)
{
    pthread_once(&table_once, cpu_table_build);
    *n = n_enabled_providers;
    return enabled_providers;
}

// ---- memory: plain host memory, 64-byte aligned for vector loads ----

// Buffers of at least this many bytes (the KV cache, activations) are their
// own mappings from the kernel, on a 2 MiB boundary with transparent huge
// pages asked for. The kernel hands them out zeroed and commits each page at
// its first touch: a KV cache sized to most of the free RAM costs nothing at
// start-up (the 0.6B shape's 20 GB cache took 18 s to zero before) and only
// the memory its sequences reach.
#define CPU_HUGE_PAGE ((size_t)2 << 20)
// A mapped buffer's data starts this far into its mapping, on a 2 MiB
// boundary as the hot loops were tuned with (only the header's page of the
// head is ever touched); a heap buffer's, 64 bytes into its allocation. The
// header sits in the 64 bytes before the data.
#define CPU_MAPPED_HEAD CPU_HUGE_PAGE
#define CPU_HEAP_HEAD ((size_t)64)

struct cpu_buffer_head {
    void *base;       // what mem_pages_alloc or mem_alloc_aligned returned
    size_t map_bytes; // the mapping's length; 0 for a heap buffer
};

static struct cpu_buffer_head *cpu_head_of(void *p)
{
    return (struct cpu_buffer_head *)(void *)((char *)p - CPU_HEAP_HEAD);
}

static enum vllmc_status cpu_buffer_alloc(struct backend *be, size_t n_bytes, void **out)
{
    bool mapped = n_bytes >= CPU_HUGE_PAGE;
    size_t head = mapped ? CPU_MAPPED_HEAD : CPU_HEAP_HEAD;
    *out = NULL;
    if (n_bytes > SIZE_MAX - CPU_HUGE_PAGE)
        return err_set(&be->err, VLLMC_ERR_NOMEM, "cpu: cannot allocate %zu bytes", n_bytes);
    size_t total = head + (n_bytes ? n_bytes : 1);
    void *base = mapped ? mem_pages_alloc(CPU_HUGE_PAGE, total) : mem_alloc_aligned(64, total);
    if (!base)
        return err_set(&be->err, VLLMC_ERR_NOMEM, "cpu: cannot allocate %zu bytes", n_bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Where transparent huge pages are on request only ("madvise", a common
    // default), the KV cache got 4 KiB pages, and under a hypervisor faulting
    // them in and freeing them took most of a run: 0.6B shape, Q8_0, 16
    // sequences of 128 + 128 tokens, 74-78 s wall against 23-24 s with the
    // advice. It is only a hint; its failure (no THP in the kernel) leaves
    // ordinary pages.
    // The head stays on small pages, so the header costs one page, not two
    // MiB, whatever the system's THP policy.
    if (mapped) {
        (void)madvise(base, head, MADV_NOHUGEPAGE);
        (void)madvise((char *)base + head, n_bytes / CPU_HUGE_PAGE * CPU_HUGE_PAGE, MADV_HUGEPAGE);
    }
#endif
    *out = (char *)base + head;
    *cpu_head_of(*out) = (struct cpu_buffer_head){.base = base, .map_bytes = mapped ? total : 0};
    return VLLMC_OK;
}

static void cpu_buffer_free(struct backend *be, void *p)
{
    (void)be;
    struct cpu_buffer_head h = *cpu_head_of(p);
    if (h.map_bytes)
        mem_pages_free(h.base, h.map_bytes);
    else
        mem_free(h.base);
}

// Mapped buffers come zeroed from the kernel; only heap buffers are cleared.
static enum vllmc_status cpu_buffer_alloc_zeroed(struct backend *be, size_t n_bytes, void **out)
{
    enum vllmc_status rc = cpu_buffer_alloc(be, n_bytes, out);
    if (!rc && !cpu_head_of(*out)->map_bytes)
        memset(*out, 0, n_bytes);
    return rc;
}

#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23 // Linux 5.14; older kernels answer EINVAL
#endif

// Heap buffers are resident already; mapped ones are populated for writing,
// which faults their pages in as zeros where untouched and leaves the rest
// as they are. It leaves be->err alone: other threads use the backend.
static enum vllmc_status cpu_buffer_prefault(struct backend *be, void *buf, size_t offset, size_t n)
{
    (void)be;
    if (!cpu_head_of(buf)->map_bytes || n == 0)
        return VLLMC_OK;
#ifdef MADV_POPULATE_WRITE
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)buf + offset) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)buf + offset + n + page - 1) & ~(page - 1);
    return madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) ? VLLMC_ERR_UNSUPPORTED : VLLMC_OK;
#else
    return VLLMC_ERR_UNSUPPORTED;
#endif
}

// Weights that cpu-q-gemm-avx512 would take at one token (the provider
// registry decides, so a disabled provider or a gate that declines leaves w
// alone) and whose type has 16-row groups get them.
static enum vllmc_status cpu_prepare_weight(struct backend *be, const struct tensor *w, void **alt)
{
    *alt = NULL;
    if (w->n_dims != 2 || w->location != TENSOR_HOST)
        return VLLMC_OK;
    static float dummy[1];
    struct tensor x, y;
    if (!tensor_init_2d(&x, DTYPE_F32, dummy, w->ne[0], 1) ||
        !tensor_init_2d(&y, DTYPE_F32, dummy, w->ne[1], 1))
        return VLLMC_OK;
    struct op_call c = {.op = OP_MATMUL, .dst = &y, .src = {&x, (struct tensor *)w}, .backend = be};
    if (backend_select_provider(be, &c) != &cpu_qgemm_avx512_matmul)
        return VLLMC_OK;
    return qgemm_groups_make(&qgemm_isa_avx512, be->pool, w, alt);
}

static enum vllmc_status cpu_memset(struct backend *be, void *dst, int value, size_t n_bytes)
{
    (void)be;
    memset(dst, value, n_bytes);
    return VLLMC_OK;
}

static enum vllmc_status cpu_copy(struct backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    if (n)
        memmove(dst, src, n);
    return VLLMC_OK;
}

// MemAvailable counts reclaimable page cache, which is what a KV cache can
// use; sysconf's free pages do not.
static enum vllmc_status cpu_memory_info(struct backend *be, size_t *free_bytes,
                                         size_t *total_bytes)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return err_set(&be->err, VLLMC_ERR_IO, "cpu: cannot open /proc/meminfo");
    char line[256];
    unsigned long long total_kb = 0, avail_kb = 0;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "MemTotal: %llu kB", &total_kb);
        sscanf(line, "MemAvailable: %llu kB", &avail_kb);
    }
    fclose(f);
    if (!total_kb)
        return err_set(&be->err, VLLMC_ERR_IO, "cpu: no MemTotal in /proc/meminfo");
    *total_bytes = (size_t)total_kb * 1024;
    *free_bytes = (size_t)avail_kb * 1024;
    return VLLMC_OK;
}

static const struct backend_vtable cpu_vtable = {
    .name = "cpu",
    .api_version = BACKEND_API_VERSION,
    .location = TENSOR_HOST,
    .destroy = NULL,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_alloc_zeroed = cpu_buffer_alloc_zeroed,
    .buffer_prefault = cpu_buffer_prefault,
    .prepare_weight = cpu_prepare_weight,
    .fill = cpu_memset,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = NULL,
    .memory_info = cpu_memory_info,
};

enum vllmc_status cpu_backend_create(const struct backend_options *o, struct backend **out,
                                     struct err *err)
{
    *out = NULL;
    size_t n;
    const struct op_provider *const *providers = cpu_providers(&n);
    struct backend *be = mem_calloc(1, sizeof *be);
    if (!be)
        return err_set(err, VLLMC_ERR_NOMEM, "backend cpu: out of memory");
    enum vllmc_status rc = backend_init(be, &cpu_vtable, o, providers, n, err);
    if (rc)
        goto fail;
    rc = threadpool_create(o->n_threads, &be->pool, err);
    if (rc)
        goto fail;
    be->opts.n_threads = threadpool_n_threads(be->pool);
    *out = be;
    return VLLMC_OK;
fail:
    backend_free(be);
    return rc;
}
