// Ops and their providers. Every op kind has providers chosen by priority and
// a pure shape gate (ARCHITECTURE.md); `cpu-ref` implements every op in plain
// C with fp32 accumulation and is the ground truth of op parity.
//
// Shapes below are outermost first (see core/tensor.h: ne[0] is innermost).
// Activations are f32 unless a provider's gate says otherwise; weights may be
// f32, f16, bf16 or a packed quantized dtype.
#ifndef VLLMC_BACKEND_OP_H
#define VLLMC_BACKEND_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"
#include "vllmc.h"

struct backend;

#define OP_KIND_LIST(X)                                                                            \
    /* dst [n_tokens, dim] = src0 table [n_vocab, dim] (any dtype) at src1 ids i32 [n_tokens] */   \
    X(EMBEDDING, "embedding")                                                                      \
    /* dst [n, dim] = src0 x * rsqrt(mean(x^2) + eps) * src1 w [dim] */                            \
    X(RMSNORM, "rmsnorm")                                                                          \
    /* src2 residual [n, dim] += src0 x; dst = rmsnorm(residual) * src1 w. dst may alias src0. */  \
    X(ADD_RMSNORM, "add_rmsnorm")                                                                  \
    /* dst [m, n] = src0 x [m, k] . (src1 W [n, k])^T (+ src2 bias [n], optional). src3 perm */    \
    /* i32 [k], optional and only with int4g W: W's column l multiplies x[perm[l]] (GPTQ */        \
    /* act-order weights are stored in group order). */                                           \
    X(MATMUL, "matmul")                                                                            \
    /* in place on dst [n_tokens, n_heads, head_dim]: rotate the first rope_dim dims of each */     \
    /* head at src0 positions i32 [n_tokens] with src1 inv_freq f32 [rope_dim / 2]. */             \
    /* rope_neox: pairs (i, i + rope_dim/2) (HF rotate-half); else (2i, 2i+1) (GGUF llama). */    \
    X(ROPE, "rope")                                                                                \
    /* in place on dst [n_tokens, n_heads, head_dim]: per-head RMSNorm with src2 w [head_dim], */  \
    /* then ROPE with src0 positions and src1 inv_freq as above (Qwen3 q/k norm). */               \
    X(QK_NORM_ROPE, "qk_norm_rope")                                                                \
    /* dst [n, ff] = silu(src0 gate [n, ff]) * src1 up [n, ff]. Packed variant, src1 NULL: */     \
    /* src0 is one fused gate|up matmul output [n, 2 ff]; dst = silu(src0[:, :ff]) * src0[:, ff:] */ \
    X(SILU_MUL, "silu_mul")                                                                        \
    /* dst [m, ff] = silu(src0 x [m, k] . W_gate^T) * (x . W_up^T) with src1 W [2 ff, k] the */     \
    /* fused gate|up weight (rows [0, ff) gate, [ff, 2 ff) up): MATMUL and packed SILU_MUL in */    \
    /* one op, for decode on devices, where one warp reads both rows of an output. */              \
    X(MATMUL_SILU_MUL, "matmul_silu_mul")                                                          \
    /* dst [m, n] = (rmsnorm(h) * src2 w [k]) . (src3 W [n, k])^T (+ src4 bias [n], optional) */   \
    /* with h [m, k] = src0 x + src1 add (src1 optional: NULL = h is src0); src5 sum [m, k] */     \
    /* (optional, only with src1) receives h, the next residual stream, and overlaps neither */    \
    /* src0 nor src1 (other outputs still read them). With p.silu_mul, W is the fused gate|up */   \
    /* weight [2 ff, k] and dst [m, ff] is MATMUL_SILU_MUL of the normed h (no bias). */           \
    /* ADD_RMSNORM and the projection after it as one op, for decode on devices. */                \
    X(NORM_MATMUL, "norm_matmul")                                                                  \
    /* dst = src0 + src1, same shapes; dst may alias src0 */                                       \
    X(ADD, "add")                                                                                  \
    /* Writes src0 k and src1 v [n_tokens, n_kv_heads, head_dim] into src2 k_cache and src3 */     \
    /* v_cache [n_blocks, block_size, n_kv_heads, head_dim] at src4 slot_mapping i32 */            \
    /* [n_tokens] (slot = block_id * block_size + offset; negative = skip). dst is NULL. */       \
    X(KV_STORE, "kv_store")                                                                        \
    /* The step after a fused q|k|v matmul: src0 qkv [n_tokens, (n_heads + 2 n_kv_heads) */       \
    /* head_dim] holds q, k, v heads in that order. Per-head RMSNorm of q with src3 and of k */    \
    /* with src4 (both [head_dim], optional: NULL = none, as in QK_NORM_ROPE), RoPE of q and k */  \
    /* with src1 positions i32 [n_tokens] and src2 inv_freq f32 [rope_dim / 2] (as in ROPE), */    \
    /* then dst q [n_tokens, n_heads, head_dim] = rotated q, and rotated k and v are written */    \
    /* into src5 k_cache and src6 v_cache [n_blocks, block_size, n_kv_heads, head_dim] at src7 */  \
    /* slot_mapping i32 [n_tokens] (as in KV_STORE: negative = skip). src0 is unchanged. */        \
    X(QKV_ROPE_STORE, "qkv_rope_store")                                                            \
    /* Paged causal attention over a varlen flat batch. dst [n_tokens, n_heads, head_dim] = */     \
    /* attend(src0 q [n_tokens, n_heads, head_dim], src1 k_cache, src2 v_cache */                  \
    /* [n_blocks, block_size, n_kv_heads, head_dim]); src3 block_tables i32 */                     \
    /* [n_seqs, max_blocks_per_seq]; src4 seq_lens i32 [n_seqs] (context length after this */     \
    /* step); src5 query_start_loc i32 [n_seqs + 1]. Query j of sequence s sits at position */     \
    /* seq_lens[s] - n_q(s) + j and sees keys at positions <= its own. Scale in params. */        \
    /* p.prologue (optional): a QKV_ROPE_STORE call whose dst is src0 q and whose caches are */    \
    /* src1 and src2, run as part of the op (decode rotates q and the new key itself); a */       \
    /* token's slot must be no other key's (the block being written is one sequence's). */         \
    X(ATTENTION, "attention")                                                                      \
    /* dst i32 [n_rows] = ids sampled from src0 logits f32 [n_logits, n_vocab] (unchanged on */   \
    /* return) for src1 rows (struct sample_row as i32 [n_rows, words]) after src2 adjustments */  \
    /* (struct sample_adj as i32 [n_adj, 5], or NULL); src3 (optional) i32 [n_rows, words] gets */ \
    /* struct sample_logprob for rows that ask. See backend/sample.h. No cpu-ref provider: */      \
    /* the engine samples host logits itself. */                                                  \
    X(SAMPLE, "sample")                                                                            \
    /* in place on dst i32 [n]: dst[i] = src0 values i32 [m] at src1 index i32 [n] where */        \
    /* src1[i] >= 0 (and < m); entries with a negative index keep their value. The engine */      \
    /* feeds ids sampled on the device into the next step's input ids this way. */                \
    X(SELECT_IDS, "select_ids")

enum op_kind {
#define OP_KIND_ENUM(name, text) OP_##name,
    OP_KIND_LIST(OP_KIND_ENUM)
#undef OP_KIND_ENUM
        OP_KIND_COUNT
};

const char *op_kind_name(enum op_kind op);

struct op_call;
// The projection a NORM_MATMUL call c stands for once its norm is done: the
// MATMUL (with p.silu_mul the MATMUL_SILU_MUL) of xn with c's W and bias into
// c's dst. xn takes the place of the normed activations; c's x has their
// shape, so shape gates and contract checks pass it.
struct op_call op_norm_matmul_inner(const struct op_call *c, struct tensor *xn);

#define OP_MAX_SRC 8

// Scalar parameters; each op reads the fields its comment above names.
struct op_params {
    float eps;        // RMSNORM, ADD_RMSNORM, QK_NORM_ROPE, QKV_ROPE_STORE, NORM_MATMUL
    float scale;      // ATTENTION: usually 1/sqrt(head_dim)
    int rope_dim;     // ROPE, QK_NORM_ROPE, QKV_ROPE_STORE: rotated dims per head (<= head_dim, even)
    bool rope_neox;   // ROPE, QK_NORM_ROPE, QKV_ROPE_STORE: rotate-half pairing
    int max_seq_len;  // ATTENTION: max of seq_lens (a bound for kernels; may be 0 = compute)
    int max_q_len;    // ATTENTION: max query tokens of one sequence in this call (0 = compute)
    bool silu_mul;    // NORM_MATMUL: W is gate|up and dst the SiLU-mul of its two halves
    const struct op_call *prologue; // ATTENTION: the QKV_ROPE_STORE that makes its q, or NULL
};

struct op_call {
    enum op_kind op;
    struct tensor *dst;              // borrowed; NULL where the op says so
    struct tensor *src[OP_MAX_SRC];  // borrowed; unused entries NULL; in/out where the op says
    struct op_params p;
    struct backend *backend;         // the backend running the call (thread pool, stream)
};

// A provider: one implementation of one op. See ARCHITECTURE.md.
struct op_provider {
    const char *name;                              // "cpu-ref", "cpu-avx2", "cuda-gemv", ...
    enum op_kind op;
    int priority;                                  // higher wins
    bool (*supports)(const struct op_call *c);     // pure, cheap shape/dtype gate
    enum vllmc_status (*run)(const struct op_call *c);
    // optional: op-parity's NMSE bar for a provider that trades precision on
    // purpose (e.g. activations rounded to bf16); 0 = the bar of the dtype.
    double parity_bar;
};

#endif
