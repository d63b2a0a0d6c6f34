#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on prefill_attention_bench's shapes, for comparison.

Llama-3-8B attention (32 query heads, 8 KV heads of 128), bf16, causal; one sequence of
512, 2K and 8K new tokens, and 4 sequences of 2K new tokens after 2K cached ones (the new
rows see the cache and themselves causally: a lower-right causal mask). K and V are
contiguous tensors here (no pages), with the KV heads expanded to the query heads outside
the timed region, so each backend runs plain multi-head attention. FLOPs are counted as in
the C++ benchmark: 4 * head_dim * (visible keys summed over new rows) per query head.
Median of 20 CUDA-event-timed runs after warm-up, for each SDPA backend that accepts the
shape.

    python3 tests/bench/attention_torch_ref.py       (on the device machine)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SHAPES = [(1, 512, 0), (1, 2048, 0), (1, 8192, 0), (4, 2048, 2048)]
BACKENDS = [
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
]


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: attention_torch_ref.py needs a GPU (skipped)")
        return 0
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| sequences x new (cached) | GFLOP | backend | ms | TFLOP/s |\n|---|---|---|---|---|")
    for seqs, new, cached in SHAPES:
        total = new + cached
        q = torch.empty(seqs, HEADS, new, HEAD_DIM, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
        k = torch.empty(seqs, KV_HEADS, total, HEAD_DIM, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
        v = torch.empty_like(k).uniform_(-2, 2)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        visible = seqs * sum(cached + i + 1 for i in range(new))
        flops = 4.0 * HEAD_DIM * HEADS * visible
        for name, backend in BACKENDS:
            if cached == 0:
                call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                mask = causal_lower_right(new, total)
                call = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            try:
                with sdpa_kernel([backend]):
                    ms = median_ms(call)
            except RuntimeError as e:  # the backend does not take this shape here
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"| {seqs} x {new} ({cached}) | {flops / 1e9:.1f} | {name} | n/a | {first[:60]} |")
                continue
            print(f"| {seqs} x {new} ({cached}) | {flops / 1e9:.1f} | {name} | {ms:.3f} | "
                  f"{flops / (ms * 1e-3) / 1e12:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
