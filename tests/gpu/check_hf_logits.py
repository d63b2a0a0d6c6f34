#!/usr/bin/env python3
"""strata's forward pass vs Hugging Face transformers, on random-weight models.

For each family (Llama with GQA and llama3 RoPE scaling, Llama with tied embeddings,
Mistral, Qwen2 with QKV bias) this builds a small random model with transformers, saves
it with save_pretrained (safetensors, fp32), runs `strata logits` on the directory, and
compares strata's logits with HF's for the same token sequences:
  - "steps": logits after each token, strata feeding one token per step (prefill of one,
    then decode against its KV cache);
  - "prefill": the last token's logits with the whole sequence as one prefill.
The CPU backend must match HF fp32 within 1e-4 max abs (the weights are initialised at
a scale that gives logits of order 1-10, so this is a relative check too).

usage: python3 tests/gpu/check_hf_logits.py STRATA [--run PREFIX] [--workdir DIR]
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


def families():
    common = dict(vocab_size=320, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-5, initializer_range=0.1, torch_dtype="float32")
    yield "llama-gqa-llama3-rope", transformers.LlamaConfig(
        **common, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    yield "llama-tied", transformers.LlamaConfig(**common, tie_word_embeddings=True)
    yield "mistral", transformers.MistralConfig(**common, rope_theta=1000000.0, sliding_window=None)
    yield "qwen2-bias", transformers.Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=False,
                                                 use_sliding_window=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("--run", default="", help="a launcher to put before the binary (a device bundle's run)")
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    torch.manual_seed(0)
    work = args.workdir or tempfile.mkdtemp(prefix="strata-hf-")
    sequences = [[1, 5, 9, 200, 3, 77, 310, 2, 2, 150, 8, 64],
                 [300, 11],
                 [int(x) for x in torch.randint(0, 320, (96,))]]
    rows, ok = [], True
    for name, config in families():
        config._attn_implementation = "eager"
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
        with torch.no_grad():  # give norms and biases non-trivial values too
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif n.endswith(".bias"):
                    p.copy_(0.2 * torch.randn_like(p))
        path = os.path.join(work, name)
        model.save_pretrained(path, safe_serialization=True)
        cmd = ([args.run] if args.run else []) + [args.strata, "logits", "--model=" + path,
                                                  "--tokens=" + ";".join(",".join(map(str, s)) for s in sequences)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name}: strata failed: {out.stderr.strip()}")
            ok = False
            continue
        got = json.loads(out.stdout)
        worst_steps = worst_prefill = scale = 0.0
        for seq, mine in zip(sequences, got["sequences"]):
            with torch.no_grad():
                ref = model(torch.tensor([seq])).logits[0].double()
            steps = torch.tensor(mine["steps"], dtype=torch.float64)
            prefill = torch.tensor(mine["prefill"], dtype=torch.float64)
            worst_steps = max(worst_steps, (steps - ref).abs().max().item())
            worst_prefill = max(worst_prefill, (prefill - ref[-1]).abs().max().item())
            scale = max(scale, ref.abs().max().item())
        passed = worst_steps <= 1e-4 and worst_prefill <= 1e-4
        ok = ok and passed
        rows.append((name, scale, worst_steps, worst_prefill, "ok" if passed else "FAIL"))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print("| model | max abs logit | max abs diff (per-token steps) | max abs diff (prefill) | 1e-4 |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2e} | {r[3]:.2e} | {r[4]} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
