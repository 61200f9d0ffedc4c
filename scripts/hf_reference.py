#!/usr/bin/env python3
"""Reference greedy generations from Hugging Face transformers, for `vllmc parity`.

Builds random-weight checkpoints with real architectures' shapes (or takes an
existing Hugging Face folder), runs transformers' own modelling code in float32
over the checkpoint's bf16/f32 weights (no TF32), and writes, per prompt, the
greedy tokens and the top-5 log-probabilities of every step in the refs format
that `vllmc parity --pass default` reads:

    {"model": ..., "default": {"results": [
        {"prompt_tokens": [...], "generated_tokens": [...],
         "steps": [{"top5_decode": [[id, logprob], ...]}, ...]}]}}

Usage (needs torch, transformers and safetensors):
    hf_reference.py make-qwen3 OUT_DIR [--layers N] [--seed S]   # Qwen3-0.6B shapes, bf16
    hf_reference.py refs MODEL_DIR OUT.json [--prompts 32] [--tokens 32] [--seed S]

Random weights follow transformers' initialisation, with the embedding (tied
to lm_head, as in Qwen3-0.6B) scaled so that logits spread over several units:
with the default 0.02 init the logits of a deep random model sit within a few
hundredths of each other, and greedy choices between near-ties would measure
rounding noise instead of the implementation.
"""
import argparse
import json
import os
import sys


def qwen3_06b_config(layers):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
    )


def make_qwen3(args):
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(args.seed)
    cfg = qwen3_06b_config(args.layers)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(cfg).float()
    model.eval()
    # Norm weights of 1 hide mistakes in where a norm weight is applied.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
        # Scale the tied embedding until the logits' spread is a few units.
        ids = torch.randint(0, cfg.vocab_size, (1, 16), device=model.device)
        for _ in range(3):
            std = model(ids).logits.float().std().item()
            model.model.embed_tokens.weight.mul_(args.logit_std / max(std, 1e-6))
    model = model.to(torch.bfloat16)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    print(f"make-qwen3: {args.out}: {args.layers} layers, logit std target {args.logit_std}")


def load_f32(model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model.to(dev).eval(), dev


def refs(args):
    import torch

    model, dev = load_f32(args.model)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(args.seed)
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
        "model": os.path.basename(os.path.normpath(args.model)),
        "note": "transformers %s, float32 over the checkpoint weights, TF32 off, greedy"
        % __import__("transformers").__version__,
        "default": {"results": results},
    }
    with open(args.out, "w") as f:
        json.dump(doc, f)
    print(f"refs: {args.out}: {len(results)} prompts x {args.tokens} tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-qwen3")
    m.add_argument("out")
    m.add_argument("--layers", type=int, default=28)
    m.add_argument("--seed", type=int, default=1234)
    m.add_argument("--logit-std", type=float, default=4.0)
    r = sub.add_parser("refs")
    r.add_argument("model")
    r.add_argument("out")
    r.add_argument("--prompts", type=int, default=32)
    r.add_argument("--tokens", type=int, default=32)
    r.add_argument("--max-prompt", type=int, default=48)
    r.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.cmd == "make-qwen3":
        make_qwen3(args)
    else:
        refs(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
