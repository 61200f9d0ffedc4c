// Tensor type rules of the quantization targets. The mixtures follow
// llama.cpp's llama-quantize (no importance matrix), so a file we write has
// the same per-tensor types as one it writes for the same model:
//  - 1-D tensors (norms, biases) stay F32;
//  - the output projection (output.weight, or token_embd when tied) gets
//    Q6_K, unless the base is Q8_0, Q6_K or a float type (then the base);
//  - Q4_K_M / Q5_K_M: attn_v and ffn_down get Q6_K in the layers that
//    "use more bits" (the first and last eighth of the layers and every third
//    layer between: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2), the base
//    elsewhere;
//  - Q3_K_M: attn_v Q5_K in layers 0-1, Q4_K after; attn_output Q4_K;
//    ffn_down Q5_K in the first n/16 layers, Q4_K after;
//  - Q2_K: attn_v, attn_output and ffn_down Q3_K;
//  - --pure: every matrix in the base type, the output too.
// A row the type's block does not divide falls back as llama.cpp does:
// Q2_K, Q3_K, IQ4_XS -> IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0;
// then, if 32 does not divide the row either, F16.
#include "model/quant_mix.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mix_entry {
    const char *name;
    enum quant_mix_kind kind;
    enum dtype base;
    uint32_t file_type;
};

static const struct mix_entry mixes[] = {
    {"F32", QUANT_MIX_PLAIN, DTYPE_F32, 0},
    {"F16", QUANT_MIX_PLAIN, DTYPE_F16, 1},
    {"BF16", QUANT_MIX_PLAIN, DTYPE_BF16, 32},
    {"Q4_0", QUANT_MIX_PLAIN, DTYPE_Q4_0, 2},
    {"Q4_1", QUANT_MIX_PLAIN, DTYPE_Q4_1, 3},
    {"Q8_0", QUANT_MIX_PLAIN, DTYPE_Q8_0, 7},
    {"Q5_0", QUANT_MIX_PLAIN, DTYPE_Q5_0, 8},
    {"Q5_1", QUANT_MIX_PLAIN, DTYPE_Q5_1, 9},
    {"Q2_K", QUANT_MIX_Q2_K, DTYPE_Q2_K, 10},
    {"Q3_K", QUANT_MIX_K_S, DTYPE_Q3_K, 11},
    {"Q3_K_S", QUANT_MIX_K_S, DTYPE_Q3_K, 11},
    {"Q3_K_M", QUANT_MIX_K_M, DTYPE_Q3_K, 12},
    {"Q4_K", QUANT_MIX_K_S, DTYPE_Q4_K, 14},
    {"Q4_K_S", QUANT_MIX_K_S, DTYPE_Q4_K, 14},
    {"Q4_K_M", QUANT_MIX_K_M, DTYPE_Q4_K, 15},
    {"Q5_K", QUANT_MIX_K_S, DTYPE_Q5_K, 16},
    {"Q5_K_S", QUANT_MIX_K_S, DTYPE_Q5_K, 16},
    {"Q5_K_M", QUANT_MIX_K_M, DTYPE_Q5_K, 17},
    {"Q6_K", QUANT_MIX_PLAIN, DTYPE_Q6_K, 18},
    {"IQ4_NL", QUANT_MIX_PLAIN, DTYPE_IQ4_NL, 25},
    {"IQ4_XS", QUANT_MIX_PLAIN, DTYPE_IQ4_XS, 30},
};

#define N_MIXES (sizeof mixes / sizeof mixes[0])

bool quant_mix_parse(const char *name, bool pure, struct quant_mix *out)
{
    char up[16];
    size_t n = strlen(name);
    if (n >= sizeof up)
        return false;
    for (size_t i = 0; i <= n; i++)
        up[i] = (char)toupper((unsigned char)name[i]);
    for (size_t i = 0; i < N_MIXES; i++) {
        if (strcmp(up, mixes[i].name))
            continue;
        *out = (struct quant_mix){.kind = mixes[i].kind, .base = mixes[i].base,
                                  .file_type = mixes[i].file_type, .pure = pure};
        snprintf(out->name, sizeof out->name, "%s", up);
        return true;
    }
    return false;
}

const char *quant_mix_names(void)
{
    return "Q4_K_M Q4_K_S Q5_K_M Q5_K_S Q3_K_M Q3_K_S Q2_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K "
           "Q3_K Q6_K IQ4_NL IQ4_XS F16 BF16 F32";
}

// "blk.N.<part>.weight" -> N and whether part matches; -1 when not a block tensor.
static int layer_of(const char *name, const char *part)
{
    if (strncmp(name, "blk.", 4))
        return -1;
    char *end;
    long layer = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || layer < 0)
        return -1;
    size_t n = strlen(part);
    if (strncmp(end + 1, part, n) || strcmp(end + 1 + n, ".weight"))
        return -1;
    return (int)layer;
}

static bool use_more_bits(int layer, int n_layers)
{
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 ||
           (layer - n_layers / 8) % 3 == 2;
}

static bool is_float(enum dtype t)
{
    return t == DTYPE_F32 || t == DTYPE_F16 || t == DTYPE_BF16;
}

static enum dtype fallback(enum dtype t)
{
    switch (t) {
    case DTYPE_Q2_K: case DTYPE_Q3_K: case DTYPE_IQ4_XS: return DTYPE_IQ4_NL;
    case DTYPE_Q4_K: return DTYPE_Q5_0;
    case DTYPE_Q5_K: return DTYPE_Q5_1;
    case DTYPE_Q6_K: return DTYPE_Q8_0;
    default: return DTYPE_F16;
    }
}

enum dtype quant_mix_tensor_type(const struct quant_mix *mix, const char *name, int n_dims,
                                 int64_t ne0, int n_layers, bool is_output, enum dtype *wanted)
{
    *wanted = DTYPE_F32;
    if (n_dims < 2)
        return DTYPE_F32;
    enum dtype t = mix->base;
    if (!mix->pure) {
        int lv = layer_of(name, "attn_v"), ld = layer_of(name, "ffn_down");
        int lo = layer_of(name, "attn_output");
        if (is_output) {
            if (!is_float(t) && t != DTYPE_Q8_0)
                t = DTYPE_Q6_K;
        } else if (mix->kind == QUANT_MIX_K_M && mix->base != DTYPE_Q3_K) {
            if ((lv >= 0 && use_more_bits(lv, n_layers)) ||
                (ld >= 0 && use_more_bits(ld, n_layers)))
                t = DTYPE_Q6_K;
        } else if (mix->kind == QUANT_MIX_K_M) { // Q3_K_M
            if (lv >= 0)
                t = lv < 2 ? DTYPE_Q5_K : DTYPE_Q4_K;
            else if (lo >= 0)
                t = DTYPE_Q4_K;
            else if (ld >= 0)
                t = ld < n_layers / 16 ? DTYPE_Q5_K : DTYPE_Q4_K;
        } else if (mix->kind == QUANT_MIX_Q2_K) {
            if (lv >= 0 || lo >= 0 || ld >= 0)
                t = DTYPE_Q3_K;
        }
    }
    *wanted = t;
    while (ne0 % dtype_info(t)->block_size)
        t = fallback(t);
    return t;
}
