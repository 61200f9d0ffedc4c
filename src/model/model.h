// A loaded model: hyper-parameters, weight tensors and the forward pass.
// Weights are mapped from the file and never copied on the CPU; a device
// backend gets one upload at load time. The forward pass is nothing but
// backend_run_op() calls over a flat varlen batch (ARCHITECTURE.md).
#ifndef VLLMC_MODEL_MODEL_H
#define VLLMC_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"

struct backend;
struct gguf_file;
struct safetensors;
struct kv_cache;

#define MODEL_ARCH_LIST(X)                                                                         \
    X(LLAMA, "llama") /* Llama 2/3, Mistral, stories260K */                                        \
    X(QWEN2, "qwen2") /* q/k/v bias */                                                             \
    X(QWEN3, "qwen3") /* per-head q/k RMSNorm */

enum model_arch {
#define MODEL_ARCH_ENUM(name, text) MODEL_ARCH_##name,
    MODEL_ARCH_LIST(MODEL_ARCH_ENUM)
#undef MODEL_ARCH_ENUM
        MODEL_ARCH_COUNT
};

const char *model_arch_name(enum model_arch arch);

enum model_format { MODEL_FORMAT_GGUF, MODEL_FORMAT_SAFETENSORS };

enum rope_scaling { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_LLAMA3 };

struct model_hparams {
    enum model_arch arch;
    int n_layers;
    int dim;        // hidden size
    int n_heads;    // query heads
    int n_kv_heads; // key/value heads (grouped-query attention when < n_heads)
    int head_dim;
    int ff_dim; // SwiGLU inner size
    int n_vocab;
    int n_ctx_train; // context the model was trained for; 0 = unknown
    float rms_eps;
    float rope_theta;
    int rope_dim;   // rotated dims per head, even, <= head_dim
    bool rope_neox; // rotate-half pairs (HF layout); false = adjacent pairs (GGUF llama)
    enum rope_scaling rope_scaling;
    float rope_factor;           // LINEAR and LLAMA3
    float rope_low_freq_factor;  // LLAMA3
    float rope_high_freq_factor; // LLAMA3
    int rope_orig_ctx;           // LLAMA3: original_max_position_embeddings
    bool qkv_bias;               // q/k/v projections carry a bias
    bool qk_norm;                // per-head RMSNorm of q and k before RoPE
    bool tied_embeddings;        // lm_head is token_embd
    int bos_id;                  // -1 when the file does not say
    int eos_id;                  // -1 when the file does not say
};

// One transformer block. Tensors point into the mapping (CPU) or into the
// model's device buffer; optional ones have data == NULL.
struct model_layer {
    struct tensor attn_norm; // [dim]
    struct tensor wq;        // [n_heads * head_dim, dim]
    struct tensor wk;        // [n_kv_heads * head_dim, dim]
    struct tensor wv;        // [n_kv_heads * head_dim, dim]
    struct tensor bq;        // [n_heads * head_dim], optional
    struct tensor bk;        // [n_kv_heads * head_dim], optional
    struct tensor bv;        // [n_kv_heads * head_dim], optional
    struct tensor q_norm;    // [head_dim], qk_norm only
    struct tensor k_norm;    // [head_dim], qk_norm only
    struct tensor wo;        // [dim, n_heads * head_dim]
    struct tensor ffn_norm;  // [dim]
    struct tensor w_gate;    // [ff_dim, dim]
    struct tensor w_up;      // [ff_dim, dim]
    struct tensor w_down;    // [dim, ff_dim]
    // Int4g weights of GPTQ act-order checkpoints only (data NULL otherwise):
    // i32 [k], the input feature of each stored column (backend/op.h, MATMUL).
    struct tensor wq_perm, wk_perm, wv_perm, wo_perm, w_gate_perm, w_up_perm, w_down_perm;
    // Fused views over weights the loader laid out adjacently (model_load_params.fuse),
    // so that one matmul computes several projections; data NULL when not fused.
    struct tensor wqkv;      // [(n_heads + 2 n_kv_heads) * head_dim, dim]: wq | wk | wv rows
    struct tensor bqkv;      // [(n_heads + 2 n_kv_heads) * head_dim]: bq | bk | bv, with biases
    // [(n_heads + n_kv_heads) * head_dim, dim]: wq | wk rows where wv has another
    // dtype (llama.cpp's Q4_K_M gives some layers' wv Q6_K) and no layer bias:
    // the two matmuls still fill the fused q|k|v output.
    struct tensor wqk;
    struct tensor w_gate_up; // [2 ff_dim, dim]: w_gate | w_up rows
};

// What the file holds, for `vllmc info` and memory planning.
struct model_file_info {
    enum model_format format;
    uint32_t gguf_version; // 0 for safetensors
    int n_files;           // safetensors shards; 1 for GGUF
    int n_tensors;         // tensors in the file(s)
    int n_tensors_by_dtype[DTYPE_COUNT];
    uint64_t n_params;       // elements over all tensors in the file(s)
    size_t weight_bytes;     // bytes of the tensors the model uses (tied ones once)
    char name[128];          // general.name or the folder name
    char tokenizer_kind[64]; // e.g. "llama (SentencePiece BPE)", "BPE (tokenizer.json)", "none"
    bool has_chat_template;
};

// When the loader lays wq|wk|wv (and their biases) and w_gate|w_up out
// adjacently, giving the layers fused views that the forward pass runs as one
// matmul each. Weights of different dtypes (mixed quantizations) or with an
// act-order permutation are never fused.
enum model_fuse {
    MODEL_FUSE_AUTO, // when the backend keeps weights in device memory (no copy beyond the upload)
    MODEL_FUSE_ON,   // also on the CPU, where the fused weights are copied out of the mapping
    MODEL_FUSE_OFF,  // never
};

struct model_load_params {
    int n_tokens_max;     // scratch is sized for this many tokens per forward call
    enum model_fuse fuse; // fused projections; default AUTO, or VLLMC_FUSE=0|1 (OFF|ON)
    // Rewrite bf16 matrices as f16 on a device backend (backend_weights_to_f16):
    // --dtype float16. Default false: bf16 weights are computed as stored.
    bool weights_f16;
};

void model_load_params_default(struct model_load_params *p);

struct model {
    struct model_hparams hp;
    struct model_file_info info;
    char *path;                  // owned: the file or folder it came from
    struct backend *backend;     // borrowed; outlives the model
    struct tensor token_embd;    // [n_vocab, dim]
    struct tensor output_norm;   // [dim]
    struct tensor output;        // [n_vocab, dim]; aliases token_embd when tied
    struct model_layer *layers;  // owned, [n_layers]
    struct tensor rope_inv_freq; // f32 [rope_dim / 2], scaling applied
    struct gguf_file *gguf;      // owned, NULL for safetensors
    struct safetensors *st;      // owned, NULL for GGUF
    void *host_buf;              // owned: f32 copies of small vectors, inv_freq
    void *device_buf;            // owned backend memory: uploaded weights (device only)
    void **alts;                 // owned [n_alts], each owned: the weights' `alt` copies
    int n_alts;                  // (backend_prepare_weight)
    // Per-forward scratch in backend memory, sized once for n_tokens_max.
    int n_tokens_max;
    void *scratch; // owned backend memory
    size_t scratch_bytes;
};

// Loads a GGUF file, or a Hugging Face folder (config.json + safetensors,
// single or sharded), or a .safetensors file with config.json beside it.
// *out owns the model; free with model_free(). On failure *out is NULL and
// err names the file, the problem and, where known, the tensor.
enum vllmc_status model_load(const char *path, struct backend *be,
                             const struct model_load_params *params, struct model **out,
                             struct err *err);
void model_free(struct model *m); // NULL is a no-op

// Bytes of backend memory (at loc) the forward scratch takes for n_tokens per call.
size_t model_scratch_bytes(const struct model_hparams *hp, int n_tokens, enum tensor_location loc);

// The flat varlen batch of one step (ARCHITECTURE.md). Every tensor lives in
// the model backend's memory (host memory on the CPU) and is i32; the
// counts are plain host integers. Tokens of one sequence are contiguous.
struct model_batch {
    int n_tokens;
    int n_seqs;
    int n_logits; // rows that get logits
    int max_blocks_per_seq;        // block_tables' width: what the longest context needs
    int max_seq_len;               // >= max of seq_lens (a graph's bucket); 0 = compute
    int max_q_len;                 // max query tokens of one sequence; 0 = compute
    // Layers to run, the first ones; 0 = all. A sizing pass runs one: every
    // op meets its largest shape (and sizes its scratch) at a fraction of a
    // full step's cost. The logits are then not the model's.
    int n_layers;
    struct tensor input_ids;       // [n_tokens]
    struct tensor positions;       // [n_tokens]
    struct tensor slot_mapping;    // [n_tokens]: block_id * block_size + offset, < 0 = skip
    struct tensor block_tables;    // [n_seqs, max_blocks_per_seq], unused entries 0
    struct tensor seq_lens;        // [n_seqs]: context length after this step
    struct tensor query_start_loc; // [n_seqs + 1]
    struct tensor logits_indices;  // [n_logits]: token rows whose logits are wanted
};

// Runs the model on one batch: writes K/V of every token into kv and the
// logits of the rows listed in b->logits_indices into logits, an f32
// [n_logits, n_vocab] tensor in the backend's memory (borrowed). Engine thread only.
enum vllmc_status model_forward(struct model *m, const struct model_batch *b, struct kv_cache *kv,
                                struct tensor *logits, struct err *err);

// Records model_forward(b) into a backend graph instead of running it: *out,
// the caller's to free (backend_graph_free), replays it over the same
// buffers. On failure *out is NULL, err says why and the backend is ready for
// an eager pass. Run each batch shape eagerly once first (backend scratch
// settles). Engine thread only.
struct backend_graph;
enum vllmc_status model_forward_record(struct model *m, const struct model_batch *b,
                                       struct kv_cache *kv, struct tensor *logits,
                                       struct backend_graph **out, struct err *err);

#endif
