#!/usr/bin/env python3
"""AWQ and GPTQ INT4 checkpoints with transformers references, for `vllmc parity`.

Builds one small random-weight Llama (dim 256, ffn 768, 4 layers, GQA 4/2,
vocabulary 512, untied lm_head), quantizes its seven linear layers per block
to 4 bits in four variants and writes each as a Hugging Face folder with a
`quantization_config`, in the formats' published packing:

    int4-awq-g128        AWQ GEMM, group 128, zero points
    int4-awq-g64         AWQ GEMM, group 64, zero points
    int4-gptq-g128-act   GPTQ, group 128, desc_act (shuffled g_idx), sym
    int4-gptq-gall       GPTQ, group -1 (one group per row), asymmetric

and beside each folder NAME.refs.json: transformers' greedy tokens and top-5
log-probabilities (the refs format of hf_reference.py, `vllmc parity --pass
default`), computed (float64 by default, --ref-dtype) by LlamaForCausalLM over the *dequantized*
weights, w = (q - z) * s with the f16 scales, and the other tensors rounded
to f16 exactly as saved.

The packings (what vllm.c's src/model/int4_ckpt.c reads):
  AWQ (AutoAWQ WQLinear_GEMM.pack): qweight int32 [in, out/8]; output column
      8c + AWQ_ORDER[i] of input row r in bits 4i..4i+3 of qweight[r, c],
      AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros int32 [in/g, out/8] packed
      the same way; scales f16 [in/g, out].
  GPTQ (AutoGPTQ QuantLinear.pack, checkpoint format v1): qweight int32
      [in/8, out], input row 8p + i of column j in bits 4i of qweight[p, j];
      qzeros int32 [groups, out/8], column 8c + i at bits 4i, stored minus one;
      scales f16 [groups, out]; g_idx int32 [in], the group of each input.
      Act-order (desc_act) quantizes the inputs in a permuted order, so
      g_idx[perm[j]] = j // group_size.

Every packed layer is checked by dequantizing it back with an independent
plain-PyTorch unpacker (shift-and-mask over whole tensors, AWQ's reverse
order {0, 4, 1, 5, 2, 6, 3, 7}, GPTQ's zero + 1) against the float weights the
packer started from; any difference stops the script.

Usage (needs torch, transformers and safetensors):
    int4_reference.py OUT_DIR [--layers 4] [--seed 1234] [--prompts 32] [--tokens 32]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]

VARIANTS = [
    # name, method, group size, act-order, symmetric
    ("int4-awq-g128", "awq", 128, False, False),
    ("int4-awq-g64", "awq", 64, False, False),
    ("int4-gptq-g128-act", "gptq", 128, True, True),
    ("int4-gptq-gall", "gptq", -1, False, False),
]

LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def to_i32(v):
    """int64 tensor of 32-bit patterns -> int32 with the same bits."""
    import torch
    v = v & 0xFFFFFFFF
    return torch.where(v >= 2 ** 31, v - 2 ** 32, v).to(torch.int32)


# ---- quantization (round to nearest per group) ----

def quantize(w, gs, act_order, sym, zmin, gen):
    """w float32 [out, in] -> q int64 [in, out] (0..15), z int64 [G, out],
    s float16 [G, out], g_idx int64 [in]."""
    import torch
    out_f, in_f = w.shape
    gs = in_f if gs < 0 else gs
    n_groups = in_f // gs
    perm = torch.randperm(in_f, generator=gen) if act_order else torch.arange(in_f)
    g_idx = torch.empty(in_f, dtype=torch.int64)
    g_idx[perm] = torch.arange(in_f) // gs
    wt = w.t().contiguous()                      # [in, out]
    q = torch.empty(in_f, out_f, dtype=torch.int64)
    z = torch.empty(n_groups, out_f, dtype=torch.int64)
    s = torch.empty(n_groups, out_f, dtype=torch.float16)
    for g in range(n_groups):
        rows = perm[g * gs:(g + 1) * gs]
        blk = wt[rows]                           # [gs, out]
        if sym:
            amax = blk.abs().amax(dim=0).clamp(min=1e-5)
            sc = (2 * amax / 15).to(torch.float16)
            zz = torch.full((out_f,), 8, dtype=torch.int64)
        else:
            lo = blk.amin(dim=0).clamp(max=0)
            hi = blk.amax(dim=0).clamp(min=0)
            sc = ((hi - lo).clamp(min=1e-5) / 15).to(torch.float16)
            zz = torch.round(-lo / sc.float()).to(torch.int64).clamp(zmin, 15)
        qq = torch.round(blk / sc.float()).to(torch.int64) + zz
        q[rows] = qq.clamp(0, 15)
        z[g] = zz
        s[g] = sc
    return q, z, s, g_idx


def dequant_plain(q, z, s, g_idx):
    """The float weights the packer started from: [out, in] float32."""
    return ((q - z[g_idx]).float() * s[g_idx].float()).t().contiguous()


# ---- packing, as the formats' own pack() code writes it ----

def pack_awq(q, z):
    import torch
    in_f, out_f = q.shape
    qweight = torch.zeros(in_f, out_f // 8, dtype=torch.int64)
    qzeros = torch.zeros(z.shape[0], out_f // 8, dtype=torch.int64)
    for i in range(8):
        qweight |= q[:, AWQ_ORDER[i]::8] << (4 * i)
        qzeros |= z[:, AWQ_ORDER[i]::8] << (4 * i)
    return to_i32(qweight), to_i32(qzeros)


def pack_gptq(q, z):
    import torch
    in_f, out_f = q.shape
    qweight = torch.zeros(in_f // 8, out_f, dtype=torch.int64)
    qzeros = torch.zeros(z.shape[0], out_f // 8, dtype=torch.int64)
    for i in range(8):
        qweight |= q[i::8, :] << (4 * i)
        qzeros |= ((z[:, i::8] - 1) & 0xF) << (4 * i)
    return to_i32(qweight), to_i32(qzeros)


# ---- the independent unpacker used to check the packing ----

def unpack_awq(qweight, qzeros, scales, gs):
    import torch
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    iw = torch.bitwise_and(torch.bitwise_right_shift(qweight[:, :, None], shifts), 15)
    iz = torch.bitwise_and(torch.bitwise_right_shift(qzeros[:, :, None], shifts), 15)
    rev = torch.tensor(AWQ_REVERSE_ORDER)
    iw = iw[:, :, rev].reshape(qweight.shape[0], -1)
    iz = iz[:, :, rev].reshape(qzeros.shape[0], -1)
    in_f = qweight.shape[0]
    gs = in_f if gs < 0 else gs
    g = torch.arange(in_f) // gs
    return ((iw - iz[g]).float() * scales[g].float()).t().contiguous()


def unpack_gptq(qweight, qzeros, scales, g_idx):
    import torch
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    iw = torch.bitwise_and(torch.bitwise_right_shift(qweight[:, None, :], shifts[None, :, None]), 15)
    iw = iw.reshape(-1, qweight.shape[1])
    iz = torch.bitwise_and(torch.bitwise_right_shift(qzeros[:, :, None], shifts), 15)
    iz = iz.reshape(qzeros.shape[0], -1) + 1
    g = g_idx.long()
    return ((iw - iz[g]).float() * scales[g].float()).t().contiguous()


# ---- the model ----

def make_base(args):
    import torch
    import transformers as tf

    torch.manual_seed(args.seed)
    cfg = tf.LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=768,
        num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2)
    model = tf.LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("_proj.weight"):
                # Wider than the 0.02 init so that the 4-bit grid is exercised.
                p.copy_(0.05 * torch.randn_like(p))
    return cfg, model


def build_variant(cfg, base, variant, args):
    import copy
    import torch
    from safetensors.torch import save_file

    name, method, gs, act_order, sym = variant
    gen = torch.Generator().manual_seed(args.seed + 17)
    model = copy.deepcopy(base)
    tensors = {}
    with torch.no_grad():
        for li, layer in enumerate(model.model.layers):
            for lin in LINEARS:
                mod = layer.get_submodule(lin)
                w = mod.weight.detach().float().cpu()
                q, z, s, g_idx = quantize(w, gs, act_order, sym, 0 if method == "awq" else 1, gen)
                want = dequant_plain(q, z, s, g_idx)
                prefix = f"model.layers.{li}.{lin}"
                if method == "awq":
                    qweight, qzeros = pack_awq(q, z)
                    got = unpack_awq(qweight, qzeros, s, gs)
                else:
                    qweight, qzeros = pack_gptq(q, z)
                    got = unpack_gptq(qweight, qzeros, s, g_idx.to(torch.int32))
                    tensors[prefix + ".g_idx"] = g_idx.to(torch.int32)
                if not torch.equal(got, want):
                    raise SystemExit(f"{name}: {prefix}: unpacking does not give the packed "
                                     f"weights back (max diff {(got - want).abs().max()})")
                tensors[prefix + ".qweight"] = qweight
                tensors[prefix + ".qzeros"] = qzeros
                tensors[prefix + ".scales"] = s
                mod.weight.copy_(want.to(mod.weight.device))
        # The other tensors are saved in f16; the references use those values.
        for pname, p in model.named_parameters():
            if not pname.endswith("_proj.weight"):
                p.copy_(p.to(torch.float16).float())
        # Spread the logits to a few units (see hf_reference.py), in f16 steps.
        out_w = model.lm_head.weight
        ids = torch.randint(3, cfg.vocab_size, (1, 16), generator=gen)
        for _ in range(3):
            std = model(ids).logits.float().std().item()
            out_w.mul_(args.logit_std / max(std, 1e-6))
            out_w.copy_(out_w.to(torch.float16).float())
        for pname, p in model.named_parameters():
            if not pname.endswith("_proj.weight"):
                tensors[pname] = p.detach().to(torch.float16).contiguous()
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    conf = cfg.to_dict()
    conf["architectures"] = ["LlamaForCausalLM"]
    conf["torch_dtype"] = "float16"
    if method == "awq":
        conf["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": gs,
                                       "zero_point": True, "version": "gemm"}
    else:
        conf["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": gs,
                                       "desc_act": act_order, "sym": sym,
                                       "checkpoint_format": "gptq"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
    print(f"make: {out}: {method} group {gs}{' act-order' if act_order else ''}"
          f"{' sym' if sym else ''}, packing checked against the unpacker")
    return model, name


def main():
    import torch
    from hf_reference import add_ref_args, ref_dtype, write_refs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--logit-std", type=float, default=4.0)
    ap.add_argument("--only", help="one variant name")
    add_ref_args(ap)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg, base = make_base(args)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for v in VARIANTS:
        if args.only and v[0] != args.only:
            continue
        model, name = build_variant(cfg, base, v, args)
        # float64 by default (hf_reference.py --ref-dtype); f32 -> f64 loses nothing.
        model = model.to(dev).to(ref_dtype(args)).eval()
        write_refs(model, dev, name, os.path.join(args.out, name + ".refs.json"), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
