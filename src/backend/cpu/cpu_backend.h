// The CPU backend: host memory, a worker pool and the CPU op providers.
#ifndef VLLMC_BACKEND_CPU_CPU_BACKEND_H
#define VLLMC_BACKEND_CPU_CPU_BACKEND_H

#include <stdbool.h>

#include "backend/backend.h"

// CPU features, detected once when the provider table is built.
struct cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    // 512-bit operations run as two 256-bit halves (AMD family 19h, Zen 4):
    // there, converting 16-bit weights in every row tile costs more than
    // converting them once into an f32 panel (see matmul_tiled.c).
    bool avx512_split;
    // AMD family 1Ah (Zen 5): full-width 512-bit units, on which a lone
    // token's quantized rows read fastest 4 at a time (quant/qgemm.c); other
    // CPUs read them faster as 16 streams.
    bool amd_zen5;
    // AMX tiles with bf16 and int8 products (Intel Xeon from Sapphire Rapids
    // on), and the kernel's leave to use their state (arch_prctl, Linux 5.16 on).
    bool amx_bf16, amx_int8;
};

const struct cpu_features *cpu_features_get(void);

// Every CPU provider whose CPU features are present, in table order.
const struct op_provider *const *cpu_providers(size_t *n);

enum vllmc_status cpu_backend_create(const struct backend_options *o, struct backend **out,
                                     struct err *err);

#endif
