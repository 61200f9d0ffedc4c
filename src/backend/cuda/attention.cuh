// Paged causal attention on the GPU for varlen batches that mix prefill
// chunks and decode tokens: GQA-aware tiles, split-K for long decodes.
#ifndef VLLMC_BACKEND_CUDA_ATTENTION_CUH
#define VLLMC_BACKEND_CUDA_ATTENTION_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

// Decode-only batches (max_q_len 1 with max_seq_len given) use kernels of
// their own: mode 4 (the default) the short-split kernel where a split fits
// it, its 2-8 splits merged inside their thread-block cluster (sm_90+), else
// the pipelined decode kernel; 3 the same with a merge kernel after; 2 the
// pipelined kernel only; 1 the first decode kernel; 0 none (the tiled kernel
// serves every batch). Set from VLLMC_CUDA_DECODE_ATTENTION at backend
// creation, for comparisons.
void cuda_attention_set_decode(int mode);
// Tensor-core decode (VLLMC_CUDA_DECODE_MMA=MODE[,MAX_KEYS[,MINB[,STAGES]]]):
// 0 off, 1 for batches that keep splits long (default), 2 wherever it
// applies; MAX_KEYS bounds its splits (a power of two from 64; 0: the
// default, 1024); MINB the blocks an SM holds at head_dim 128 (2 or 3, by
// register budget); STAGES 1 loads each tile into registers as it is
// needed, 2 or 3 copy a warp's tiles through shared memory 1 or 2 tiles
// ahead (3: MINB 2). MINB or STAGES 0 (or left out): chosen by the split's
// length (over 512 keys MINB 2 and stages 3, else MINB 3 and stages 2).
void cuda_attention_set_decode_mma(int mode, int max_keys, int min_blocks, int stages);
// Decode split-K: at most max_keys keys per split (a power of two >= 32),
// splitting further until the grid has blocks_per_sm blocks per SM, but not
// below min_keys keys (defaults 128, 2 and 32;
// VLLMC_CUDA_DECODE_SPLIT=MAX_KEYS,BLOCKS_PER_SM[,MIN_KEYS]). 0 keeps a value.
void cuda_attention_set_decode_split(int max_keys, int blocks_per_sm, int min_keys);

bool cuda_attention_supports(const struct op_call *c);
enum vllmc_status cuda_attention_run(const struct op_call *c);
// ATTENTION with its QKV_ROPE_STORE prologue (p.prologue) in decode batches:
// the short-split decode kernel rotates q and the new key and stores k and v
// itself where it can, else the prologue's kernel runs first.
bool cuda_attention_rope_supports(const struct op_call *c);
enum vllmc_status cuda_attention_rope_run(const struct op_call *c);

// The same op on tensor cores (attention_prefill.cu) for calls with many query
// tokens per sequence; f16/bf16 operands, so op parity holds it to 5e-4.
bool cuda_attention_tc_supports(const struct op_call *c);
enum vllmc_status cuda_attention_tc_run(const struct op_call *c);
// The same kernel reading its mma operands from shared memory with ldmatrix.
enum vllmc_status cuda_attention_tc_ldsm_run(const struct op_call *c);
// Prefill settings (VLLMC_CUDA_PREFILL_ATTENTION=STAGE[,BELOW[,COVER[,MIN_KEYS]]]):
// STAGE 1 (default) copies an f32 cache's next K/V tile with cp.async during
// the current one's compute, 0 loads each tile before its compute; keys are
// split across blocks when the blocks with rows number fewer than BELOW / 4 x
// n_sms (default 4), into enough splits for COVER x n_sms blocks (default 2),
// each walking at least MIN_KEYS keys (default 256). Zero keeps BELOW,
// COVER and MIN_KEYS.
void cuda_attention_set_prefill(int stage_f32, int below, int cover, int min_keys);

#ifdef __cplusplus
}
#endif
#endif
