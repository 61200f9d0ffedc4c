#!/usr/bin/env python3
"""Reference greedy generations from Hugging Face transformers, for `vllmc parity`.

Builds random-weight checkpoints with real architectures' shapes (or takes an
existing Hugging Face folder), runs transformers' own modelling code in float64
(or float32 with --ref-dtype; TF32 off either way) over the checkpoint's bf16/f32
weights, and writes, per prompt, the
greedy tokens and the top-5 log-probabilities of every step in the refs format
that `vllmc parity --pass default` reads:

    {"model": ..., "default": {"results": [
        {"prompt_tokens": [...], "generated_tokens": [...],
         "steps": [{"top5_decode": [[id, logprob], ...]}, ...]}]}}

Usage (needs torch, transformers and safetensors):
    hf_reference.py make SHAPE OUT_DIR [--layers N] [--seed S] [--refs OUT.json]
    hf_reference.py refs MODEL_DIR OUT.json [--prompts 32] [--tokens 32] [--seed S]

SHAPE is one of (layer shapes of the published models, random weights, bf16):
    qwen3-0.6b   Qwen3-0.6B: 28 layers, dim 1024, GQA 16/8, per-head q/k norm, tied
    qwen3-8b     Qwen3-8B: 36 layers, dim 4096, GQA 32/8, untied output
    llama3-1b    Llama-3.2-1B: 16 layers, dim 2048, GQA 32/8, llama3 rope scaling
                 (factor 32, original context 8192), rope theta 500000, tied
    qwen2-0.5b   Qwen2.5-0.5B: 24 layers, dim 896, GQA 14/2, q/k/v bias, tied

Random weights follow transformers' initialisation with three changes, each
so that a wrong implementation cannot pass by accident:
  - norm weights are 1 + 0.2 N(0,1) (all-ones weights hide where a norm is applied);
  - q/k/v biases (qwen2) are 0.5 N(0,1) (transformers initialises them to zero);
  - the output matrix (the tied embedding, or lm_head) is scaled until the
    logits' spread is a few units: with the default 0.02 init the logits of a
    deep random model sit within hundredths of each other, and greedy choices
    between near-ties would measure rounding noise instead of the implementation.
`make --refs` writes the references from the same process, on the weights
rounded to bf16 exactly as saved and the buffers (RoPE frequencies) as a
reloaded model computes them, which saves reloading a large checkpoint; `refs`
reads a folder from disk.
"""
import argparse
import json
import os
import sys


def make_config(shape, layers):
    import transformers as tf

    if shape == "qwen3-0.6b":
        return tf.Qwen3Config(
            vocab_size=151936, hidden_size=1024, intermediate_size=3072,
            num_hidden_layers=layers or 28, num_attention_heads=16, num_key_value_heads=8,
            head_dim=128, max_position_embeddings=40960,
            rms_norm_eps=1e-6, tie_word_embeddings=True,
            bos_token_id=151643, eos_token_id=151645), tf.Qwen3ForCausalLM
    if shape == "qwen3-8b":
        return tf.Qwen3Config(
            vocab_size=151936, hidden_size=4096, intermediate_size=12288,
            num_hidden_layers=layers or 36, num_attention_heads=32, num_key_value_heads=8,
            head_dim=128, max_position_embeddings=40960,
            rms_norm_eps=1e-6, tie_word_embeddings=False,
            bos_token_id=151643, eos_token_id=151645), tf.Qwen3ForCausalLM
    if shape == "llama3-1b":
        return tf.LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192,
            num_hidden_layers=layers or 16, num_attention_heads=32, num_key_value_heads=8,
            head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
            tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001), \
            tf.LlamaForCausalLM
    if shape == "qwen2-0.5b":
        return tf.Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864,
            num_hidden_layers=layers or 24, num_attention_heads=14, num_key_value_heads=2,
            max_position_embeddings=32768, rms_norm_eps=1e-6,
            tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645), \
            tf.Qwen2ForCausalLM
    raise SystemExit(f"unknown shape {shape}")


ROPE = {  # shape: (theta, scaling or None)
    "qwen3-0.6b": (1000000.0, None),
    "qwen3-8b": (1000000.0, None),
    "llama3-1b": (500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}),
    "qwen2-0.5b": (1000000.0, None),
}


def set_rope(cfg, shape, with_scaling=True):
    """Sets rope theta and scaling the way the installed transformers stores them
    (rope_parameters from version 5 on, rope_theta + rope_scaling before)."""
    theta, scaling = ROPE[shape]
    scaling = scaling if with_scaling else None
    if hasattr(cfg, "rope_parameters"):
        rp = {"rope_type": "default", "rope_theta": theta}
        rp.update(scaling or {})
        cfg.rope_parameters = rp
    else:
        cfg.rope_theta = theta
        cfg.rope_scaling = scaling


def exact_math():
    """No TF32 anywhere: not in the model's matmuls, not in the f32 RoPE angle
    product (position x inv_freq) that transformers computes as a matmul."""
    import torch

    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for backend in (torch.backends.cuda.matmul, torch.backends.cudnn):
        if hasattr(backend, "fp32_precision"):
            try:
                backend.fp32_precision = "ieee"
            except (AttributeError, RuntimeError, ValueError):
                pass


def ref_dtype(args):
    import torch

    return torch.float64 if args.ref_dtype == "float64" else torch.float32


def make(args):
    import torch

    exact_math()
    torch.manual_seed(args.seed)
    cfg, cls = make_config(args.shape, args.layers)
    set_rope(cfg, args.shape, not args.no_rope_scaling)
    for kv in args.set or []:
        key, value = kv.split("=", 1)
        setattr(cfg, key, json.loads(value))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(dev):
        model = cls(cfg).float()
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("_proj.bias"):
                p.copy_(0.5 * torch.randn_like(p))
        out_w = model.get_output_embeddings().weight
        ids = torch.randint(0, cfg.vocab_size, (1, 16), device=dev)
        for _ in range(3):
            std = model(ids).logits.float().std().item()
            out_w.mul_(args.logit_std / max(std, 1e-6))
        # What is saved is bf16; the references run on exactly those values.
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    # Module.to() casts floating buffers too: RoPE's inv_freq would come back
    # from the bf16 round trip rounded to 8 bits, unlike in a model loaded
    # from the saved folder (it recomputes inv_freq in f32). Keep them.
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    with open(os.path.join(args.out, "config.json")) as f:
        saved = json.load(f)
    scaling = ROPE[args.shape][1] if not args.no_rope_scaling else None
    if scaling and scaling["rope_type"] not in json.dumps(saved):
        raise SystemExit(f"make: {args.out}/config.json lost the {scaling['rope_type']} rope scaling")
    n = sum(p.numel() for p in model.parameters())
    print(f"make: {args.out}: {args.shape}, {cfg.num_hidden_layers} layers, "
          f"{n / 1e9:.2f} B parameters, logit std target {args.logit_std}")
    if args.refs:
        model = model.to(ref_dtype(args)).eval()
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
        write_refs(model, dev, os.path.basename(os.path.normpath(args.out)), args.refs, args)


def load_model(model_dir, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    exact_math()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    return model.to(dev).eval(), dev


def write_refs(model, dev, name, out_path, args):
    import torch

    exact_math()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(args.ref_seed)
    results = []
    for i in range(args.prompts):
        n = int(torch.randint(4, args.max_prompt + 1, (1,), generator=g))
        # Ids below 256 (bytes / specials of small vocabularies) are avoided
        # only when the vocabulary is large enough to have ordinary tokens.
        lo = 256 if vocab > 4096 else 3
        prompt = torch.randint(lo, vocab, (n,), generator=g).tolist()
        ids = torch.tensor([prompt], device=dev)
        past = None
        out, steps = [], []
        with torch.no_grad():
            for _ in range(args.tokens):
                r = model(ids, past_key_values=past, use_cache=True)
                past = r.past_key_values
                logits = r.logits[0, -1].double()
                lp = torch.log_softmax(logits, dim=-1)
                top = torch.topk(lp, 5)
                tok = int(torch.argmax(logits))
                out.append(tok)
                steps.append({"top5_decode": [[int(t), float(v)] for v, t in
                                              zip(top.values.tolist(), top.indices.tolist())]})
                ids = torch.tensor([[tok]], device=dev)
        results.append({"prompt_tokens": prompt, "generated_tokens": out, "steps": steps})
    doc = {
        "model": name,
        "note": "transformers %s, %s over the checkpoint weights, TF32 off, greedy"
        % (__import__("transformers").__version__, args.ref_dtype),
        "default": {"results": results},
    }
    with open(out_path, "w") as f:
        json.dump(doc, f)
    print(f"refs: {out_path}: {len(results)} prompts x {args.tokens} tokens")


def refs(args):
    model, dev = load_model(args.model, ref_dtype(args))
    write_refs(model, dev, os.path.basename(os.path.normpath(args.model)), args.out, args)


def add_ref_args(p):
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--max-prompt", type=int, default=48)
    p.add_argument("--ref-seed", type=int, default=7)
    p.add_argument("--ref-dtype", choices=["float64", "float32"], default="float64")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("shape", choices=["qwen3-0.6b", "qwen3-8b", "llama3-1b", "qwen2-0.5b"])
    m.add_argument("out")
    m.add_argument("--layers", type=int, default=0, help="default: the shape's own")
    m.add_argument("--seed", type=int, default=1234)
    m.add_argument("--logit-std", type=float, default=4.0)
    m.add_argument("--refs", help="also write references to this file")
    m.add_argument("--no-rope-scaling", action="store_true",
                   help="the shape without its rope scaling (to tell a scaling error from others)")
    m.add_argument("--set", action="append", metavar="KEY=JSON",
                   help="override one config field, e.g. rms_norm_eps=1e-6 (repeatable)")
    add_ref_args(m)
    r = sub.add_parser("refs")
    r.add_argument("model")
    r.add_argument("out")
    add_ref_args(r)
    args = ap.parse_args()
    if args.cmd == "make":
        make(args)
    else:
        refs(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
