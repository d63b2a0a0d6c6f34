#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on relay_attention_bench's shapes, for comparison.

Llama-3-8B attention (32 query heads, 8 KV heads of 128), bf16: `batch` decode queries, each
against its own sequence of S shared prompt tokens + ctx of its own (plain attention: what
a server without relay attention runs; K and V contiguous per sequence, the KV heads
expanded to the query heads outside the timed region), and the relay form in PyTorch: the
group's queries as one batch of rows against the prompt once, each query against its own
ctx tokens, merged on log-sum-exp. Median of 20 CUDA-event-timed runs after warm-up, L2
flushed before each.

Then relay's system part alone as a library's fused attention kernel: SDPA through cuDNN's
and through FlashAttention-2's backend (where torch has them) on the rows relay packs, a KV
head's batch x 4 query rows as one sequence of queries against the prompt's keys (no mask),
in TFLOP/s (4 x rows x keys x head_dim x KV heads a run), and the intercept 2 t(S) - t(2S)
of its time over the prompt's length: the fixed part of its time (launch, first loads,
store), the peer of relay_attention_bench's fit of the wgmma system part.

    python3 tests/bench/relay_torch_ref.py       (on the device machine)
"""
import torch
import torch.nn.functional as F

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def median_ms(fn, reps=20):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def attend_lse(q, k, v, scale):
    """(o, lse) of q [n, h, m, d] against k, v [n, h, t, d], fp32 softmax."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.matmul(torch.exp(s - lse), v.float()), lse


def main():
    torch.manual_seed(0)
    dev = "cuda"
    scale = HEAD_DIM ** -0.5
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print("| batch | S | ctx | SDPA plain (ms) | PyTorch relay (ms) |")
    print("|---|---|---|---|---|")
    for prompt, ctx, batch in [(p, c, b) for p in (1024, 4096, 8192) for c in (128, 1024) for b in (1, 8, 32, 64)]:
        group = HEADS // KV_HEADS
        q = torch.randn(batch, HEADS, 1, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        kp = torch.randn(1, KV_HEADS, prompt, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        vp = torch.randn_like(kp)
        kc = torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        k_full = torch.cat([kp.expand(batch, -1, -1, -1), kc], dim=2).repeat_interleave(group, dim=1).contiguous()
        v_full = torch.cat([vp.expand(batch, -1, -1, -1), vc], dim=2).repeat_interleave(group, dim=1).contiguous()
        plain_ms = median_ms(lambda: F.scaled_dot_product_attention(q, k_full, v_full, scale=scale))
        kp_h = kp.repeat_interleave(group, dim=1).contiguous()
        vp_h = vp.repeat_interleave(group, dim=1).contiguous()
        kc_h = kc.repeat_interleave(group, dim=1).contiguous()
        vc_h = vc.repeat_interleave(group, dim=1).contiguous()

        def relay():
            # System part: the batch's queries as rows of one sequence against the prompt.
            qs = q.transpose(0, 2)  # [1, h, batch, d]
            o_sys, lse_sys = attend_lse(qs, kp_h, vp_h, scale)
            o_sys, lse_sys = o_sys.transpose(0, 2), lse_sys.transpose(0, 2)
            o_ctx, lse_ctx = attend_lse(q, kc_h, vc_h, scale)
            a = torch.sigmoid(lse_sys - lse_ctx)
            return a * o_sys + (1 - a) * o_ctx

        relay_ms = median_ms(relay)
        print(f"| {batch} | {prompt} | {ctx} | {plain_ms:.3f} | {relay_ms:.3f} |")
    system_part_alone(dev, scale)


def system_part_alone(dev, scale):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    group = HEADS // KV_HEADS
    print()
    print("System part alone: SDPA on relay's packed rows (batch x 4 a KV head) against the prompt, no mask")
    print("| batch | S | " + " | ".join(f"{n} (ms) | {n} TFLOP/s | {n} fixed part 2t(S)-t(2S) (ms)" for n, _ in backends)
          + " |")
    print("|---|---|" + "---|---|---|" * len(backends))
    for batch in (32, 64):
        rows = batch * group
        q = torch.randn(1, KV_HEADS, rows, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        for prompt in (1024, 4096, 8192):
            cells = []
            for _, backend in backends:
                times = []
                for keys in (prompt, 2 * prompt):
                    k = torch.randn(1, KV_HEADS, keys, HEAD_DIM, device=dev, dtype=torch.bfloat16)
                    v = torch.randn_like(k)
                    try:
                        with sdpa_kernel([backend]):
                            times.append(median_ms(lambda: F.scaled_dot_product_attention(q, k, v, scale=scale)))
                    except RuntimeError:
                        times.append(None)
                t, t2 = times
                if t is None:
                    cells.append("n/a | n/a | n/a")
                    continue
                flops = 4.0 * rows * prompt * HEAD_DIM * KV_HEADS
                fixed = f"{2 * t - t2:.4f}" if t2 is not None else "n/a"
                cells.append(f"{t:.4f} | {flops / (t * 1e-3) / 1e12:.0f} | {fixed}")
            print(f"| {batch} | {prompt} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
