#!/usr/bin/env python3
"""HF transformers on the same shapes as tests/bench/model_bench.cc: the baseline.

Random bf16 weights (no download), SDPA attention, on the GPU. Prints, in the same
table layout as model_bench:
  - decode step time at batch 1/8/32/64 x context 1K/8K (a DynamicCache prefilled with
    the context, then one-token steps; cases whose KV does not fit are skipped);
  - prefill time of one 512..8K-token prompt (logits of the last token only).

usage: python3 tests/bench/model_bench_hf.py [--models llama3-8b,llama3-1b] [--quick]
"""
import argparse
import time

import torch
import transformers


def shape(name):
    common = dict(vocab_size=128256, max_position_embeddings=8192 + 64, rope_theta=500000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                  num_attention_heads=32, num_key_value_heads=8)
    if name == "llama3-8b":
        return transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, **common)
    return transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                    head_dim=64, tie_word_embeddings=True, **common)


def timed(fn, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def run(name, quick):
    config = shape(name)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).eval()
    torch.set_default_dtype(torch.float32)
    free, _ = torch.cuda.mem_get_info()
    kv_token_bytes = 2 * config.num_hidden_layers * config.num_key_value_heads * (
        config.hidden_size // config.num_attention_heads if name == "llama3-8b" else 64) * 2
    print(f"\n{name} (HF transformers {transformers.__version__}, torch {torch.__version__}, sdpa, bf16)")
    print(f"{'batch':<8} {'context':<8} {'step_ms':>12} {'tokens/s':>12}")
    steps = 3 if quick else 8
    for ctx in (1024, 8192):
        for batch in (1, 8, 32, 64):
            # The cache, the prefill's activations and logits need room beyond the KV.
            if batch * (ctx + steps + 4) * kv_token_bytes > 0.6 * free:
                print(f"{batch:<8} {ctx:<8} {'-':>12} (does not fit)")
                continue
            try:
                t = decode_step_time(model, config, batch, ctx, steps)
                print(f"{batch:<8} {ctx:<8} {t * 1e3:>12.3f} {batch / t:>12.0f}")
            except torch.OutOfMemoryError:
                print(f"{batch:<8} {ctx:<8} {'-':>12} (out of GPU memory)")
            torch.cuda.empty_cache()
    print(f"{'prompt':<8} {'prefill_ms':>12} {'tokens/s':>12}")
    for n in (512, 1024, 2048, 4096, 8192):
        if quick and n > 1024:
            break
        ids = torch.randint(0, config.vocab_size, (1, n), device="cuda")
        with torch.no_grad():
            t = timed(lambda: model(ids, use_cache=False, logits_to_keep=1), 2 if quick else 4)
        print(f"{n:<8} {t * 1e3:>12.2f} {n / t:>12.0f}")
    del model
    torch.cuda.empty_cache()


def decode_step_time(model, config, batch, ctx, steps):
    """Median time of one-token greedy steps after a prefill of `ctx` tokens per sequence."""
    with torch.no_grad():
        ids = torch.randint(0, config.vocab_size, (batch, ctx), device="cuda")
        cache = transformers.DynamicCache()
        out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        del out, ids

        def step():
            nonlocal nxt
            o = model(nxt, past_key_values=cache, use_cache=True)
            nxt = o.logits[:, -1].argmax(-1, keepdim=True)

        step()
        return timed(step, steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="llama3-8b,llama3-1b")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}")
    for name in args.models.split(","):
        run(name, args.quick)


if __name__ == "__main__":
    main()
