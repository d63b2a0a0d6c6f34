#!/usr/bin/env python3
"""strata's forward pass vs Hugging Face transformers, on random-weight models.

For each family (Llama with GQA and llama3 RoPE scaling, Llama with tied embeddings,
Mistral, Qwen2 with QKV bias, Qwen2 with GQA 7, Llama with GQA 3, 5, 6, 12 and 16 and
with head_dim 80, 96 and 256, Qwen3 with its q/k norms, tied and not)
this builds a small random model with transformers, saves
it with save_pretrained (safetensors, fp32), runs `strata logits` on the directory, and
compares strata's logits with HF's for the same token sequences:
  - "steps": logits after each token, strata feeding one token per step (prefill of one,
    then decode against its KV cache);
  - "prefill": the last token's logits with the whole sequence as one prefill.
The CPU backend must match HF fp32 within 1e-4 max abs (the weights are initialised at
a scale that gives logits of order 1-10, so this is a relative check too).

With --device cuda the models have head_dim 64 (Qwen3: 128; llama-hd*: 80, 96, 256) and are
saved in bf16; the reference is HF in fp32 on those same bf16 weights. The CUDA backend
(bf16 operands and KV, fp32 accumulation) must keep its relative error
||strata - ref|| / ||ref|| within 2x that of HF itself run in bf16 on the same weights
(what bf16 arithmetic costs), and agree on the top-1 token at >= 99% of the decisive
positions: those where the reference's top-1 leads its runner-up by more than 4x the
RMS logit error HF bf16 shows there. (On random weights many positions are near-ties that
bf16 rounding flips for HF as much as for strata; both agreements are printed.)

The trained built-in model (model/builtin, a Hugging Face Llama directory of BF16 weights)
is checked the same way on real text (a chat in its template and held-out prose), where
top-1 agreement is meaningful at every position: the CPU backend must agree at all of them,
the CUDA backend at >= 99%.

usage: python3 tests/gpu/check_hf_logits.py STRATA [--run PREFIX] [--workdir DIR] [--device cpu|cuda]
  STRATA: the strata binary (or the bundle's name when --run is given, e.g.
          --run bundle/run STRATA=strata). Exits 1 when any check fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers

BUILTIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model", "builtin")


def builtin_sequences():
    """Real text for the built-in byte-level model: a chat in its template, held-out prose."""
    bos, user, assistant, end = 256, 259, 260, 261
    prose = open(os.path.join(BUILTIN, "held_out.txt"), "rb").read()
    chat = ([bos, user] + list(b"Tell me about Moses.") + [end, assistant] +
            list(b"And Moses said unto the LORD, Behold, the children of Israel have not hearkened unto me;") + [end])
    return [chat, [bos] + list(prose[:180]), list(prose[2000:2100])]


def builtin_model(dtype):
    return transformers.AutoModelForCausalLM.from_pretrained(BUILTIN, torch_dtype=dtype,
                                                             attn_implementation="eager").eval()


def families(device):
    common = dict(vocab_size=320, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-5, initializer_range=0.1, torch_dtype="float32")
    if device == "cuda":  # head_dim 64, GQA group 4
        common.update(vocab_size=1024, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                      initializer_range=0.04)
    yield "llama-gqa-llama3-rope", transformers.LlamaConfig(
        **common, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    yield "llama-tied", transformers.LlamaConfig(**common, tie_word_embeddings=True)
    yield "mistral", transformers.MistralConfig(**common, rope_theta=1000000.0, sliding_window=None)
    yield "qwen2-bias", transformers.Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=False,
                                                 use_sliding_window=False)
    # Qwen2.5-0.5B's attention shape: 14 query heads over 2 KV heads (GQA 7).
    gqa7 = dict(common, num_attention_heads=14, num_key_value_heads=2,
                hidden_size=896 if device == "cuda" else 112)
    yield "qwen2-gqa7", transformers.Qwen2Config(**gqa7, rope_theta=1000000.0, tie_word_embeddings=True,
                                                 use_sliding_window=False)
    # GQA past 8 (the CUDA kernels' subgroups): 16 and 12 query heads over one KV head.
    for group in (16, 12):
        wide = dict(common, num_attention_heads=group, num_key_value_heads=1,
                    hidden_size=group * (64 if device == "cuda" else 16))
        yield f"llama-gqa{group}", transformers.LlamaConfig(**wide, rope_theta=500000.0)
    # GQA 3, 5 and 6 (Qwen2.5-1.5B: 6; -14B and -32B: 5) over two KV heads.
    for group in (3, 5, 6):
        gqa = dict(common, num_attention_heads=2 * group, num_key_value_heads=2,
                   hidden_size=2 * group * (64 if device == "cuda" else 16))
        yield f"llama-gqa{group}", transformers.LlamaConfig(**gqa, rope_theta=500000.0)
    # The other head sizes the CUDA kernels take: 80 and 96 (Phi), 256 (Gemma).
    for head_dim in (80, 96, 256):
        heads = 8 if device == "cuda" else 4
        sized = dict(common, num_attention_heads=heads, num_key_value_heads=2, hidden_size=heads * head_dim)
        if device == "cpu":  # keep the activations (and fp32 rounding) of the narrower models
            sized.update(initializer_range=common["initializer_range"] * (128 / sized["hidden_size"]) ** 0.5)
        yield f"llama-hd{head_dim}", transformers.LlamaConfig(**sized, head_dim=head_dim, rope_theta=500000.0)
    if hasattr(transformers, "Qwen3Config"):  # per-head q/k norms; head_dim not hidden / heads
        head_dim = 128 if device == "cuda" else 32
        for tied in (False, True):
            yield f"qwen3{'-tied' if tied else ''}", transformers.Qwen3Config(
                **common, head_dim=head_dim, rope_theta=1000000.0, tie_word_embeddings=tied,
                attention_bias=False, use_sliding_window=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("--run", default="", help="a launcher to put before the binary (a device bundle's run)")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    if args.device == "cuda":
        return check_cuda(args)
    torch.manual_seed(0)
    work = args.workdir or tempfile.mkdtemp(prefix="strata-hf-")
    sequences = [[1, 5, 9, 200, 3, 77, 310, 2, 2, 150, 8, 64],
                 [300, 11],
                 [int(x) for x in torch.randint(0, 320, (96,))]]
    rows, ok = [], True

    def models():
        for name, config in families("cpu"):
            config._attn_implementation = "eager"
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
            randomize(model)
            path = os.path.join(work, name)
            model.save_pretrained(path, safe_serialization=True)
            yield name, path, model, sequences
        yield "builtin-trained", BUILTIN, builtin_model(torch.float32), builtin_sequences()

    for name, path, model, seqs in models():
        got = strata_logits(args, path, "cpu", seqs, name)
        if got is None:
            ok = False
            continue
        worst_steps = worst_prefill = scale = 0.0
        agree = total = 0
        for seq, mine in zip(seqs, got["sequences"]):
            with torch.no_grad():
                ref = model(torch.tensor([seq])).logits[0].double()
            steps = torch.tensor(mine["steps"], dtype=torch.float64)
            prefill = torch.tensor(mine["prefill"], dtype=torch.float64)
            worst_steps = max(worst_steps, (steps - ref).abs().max().item())
            worst_prefill = max(worst_prefill, (prefill - ref[-1]).abs().max().item())
            scale = max(scale, ref.abs().max().item())
            agree += (steps.argmax(-1) == ref.argmax(-1)).sum().item()
            total += len(seq)
        passed = worst_steps <= 1e-4 and worst_prefill <= 1e-4 and (name != "builtin-trained" or agree == total)
        ok = ok and passed
        rows.append((name, scale, worst_steps, worst_prefill, agree / total, "ok" if passed else "FAIL"))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print("| model | max abs logit | max abs diff (per-token steps) | max abs diff (prefill) | top-1 agreement | verdict |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2e} | {r[3]:.2e} | {r[4]:.2%} | {r[5]} |")
    return 0 if ok else 1


def strata_logits(args, path, device, sequences, name):
    """`strata logits` on the directory as parsed JSON, or None (said) when it fails."""
    cmd = ([args.run] if args.run else []) + [args.strata, "logits", "--model=" + path, "--device=" + device,
                                              "--tokens=" + ";".join(",".join(map(str, s)) for s in sequences)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{name}: strata failed: {out.stderr.strip()}")
        return None
    return json.loads(out.stdout)


def randomize(model):
    with torch.no_grad():  # give norms and biases non-trivial values too
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif n.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def check_cuda(args):
    torch.manual_seed(0)
    work = args.workdir or tempfile.mkdtemp(prefix="strata-hf-cuda-")
    sequences = [[int(x) for x in torch.randint(0, 1024, (n,))] for n in (160, 96, 64, 17)]
    rows, ok = [], True

    def models():
        for name, config in families("cuda"):
            config._attn_implementation = "eager"
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
            randomize(model)
            model = model.to(torch.bfloat16)  # the weights strata serves, exactly
            path = os.path.join(work, name)
            model.save_pretrained(path, safe_serialization=True)
            yield name, path, sequences
        yield "builtin-trained", BUILTIN, builtin_sequences()

    for name, path, seqs in models():
        # fp32 arithmetic on the bf16 weights, and HF's own bf16 run
        ref_model = transformers.AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, attn_implementation="eager").cuda().eval()
        bf16_model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16).cuda().eval()
        got = strata_logits(args, path, "cuda", seqs, name)
        if got is None:
            ok = False
            continue
        agree = agree_hf = total = decisive = agree_decisive = 0
        err = err_hf = err_prefill = 0.0
        for seq, mine in zip(seqs, got["sequences"]):
            with torch.no_grad():
                ids = torch.tensor([seq]).cuda()
                ref = ref_model(ids).logits[0].double().cpu()
                hf16 = bf16_model(ids).logits[0].double().cpu()
            steps = torch.tensor(mine["steps"], dtype=torch.float64)
            prefill = torch.tensor(mine["prefill"], dtype=torch.float64)
            agree += (steps.argmax(-1) == ref.argmax(-1)).sum().item()
            top2 = ref.topk(2, dim=-1).values
            noise = ((hf16 - ref) ** 2).mean(-1).sqrt()
            mask = (top2[:, 0] - top2[:, 1]) > 4 * noise
            decisive += mask.sum().item()
            agree_decisive += ((steps.argmax(-1) == ref.argmax(-1)) & mask).sum().item()
            agree_hf += (hf16.argmax(-1) == ref.argmax(-1)).sum().item()
            total += len(seq)
            err = max(err, rel(steps, ref))
            err_hf = max(err_hf, rel(hf16, ref))
            err_prefill = max(err_prefill, rel(prefill, ref[-1]))
        passed = agree_decisive >= 0.99 * decisive and err <= 2 * err_hf and err_prefill <= 2 * err_hf
        if name == "builtin-trained":
            # A trained model: top-1 means something at every position. Its attention is
            # sharp, where HF's bf16 run stays unusually close (3e-3) while the tensor-core
            # prefill's bf16 probabilities cost ~1e-2: the prefill is held to the top of
            # bf16's band instead.
            passed = (agree_decisive >= 0.99 * decisive and err <= 2 * err_hf and err_prefill <= max(2 * err_hf, 2e-2)
                      and agree >= 0.99 * total)
        ok = ok and passed
        rows.append((name, agree / total, agree_hf / total, f"{agree_decisive}/{decisive}", err, err_prefill, err_hf,
                     "ok" if passed else "FAIL"))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| model | top-1 agreement (strata cuda) | top-1 agreement (HF bf16) | strata top-1 on decisive positions |"
          " rel. error steps | rel. error prefill | rel. error HF bf16 | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.2%} | {r[2]:.2%} | {r[3]} | {r[4]:.2e} | {r[5]:.2e} | {r[6]:.2e} | {r[7]} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
