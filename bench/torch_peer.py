#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of bench_simd_attention: the same shapes (batch 1, 8 heads, d = 64, fp32,
n in {512, 2048, 4096, 8192}, 1 and 2 threads) in PyTorch on the CPU.

- softmax attention: torch.nn.functional.scaled_dot_product_attention (CPU flash kernel in a
  current torch), causal and not; matmul-softmax-matmul where SDPA is missing; its backward
  (1 thread, n <= 4096): forward + backward through autograd, minus the forward
  (`softmax_backward`, `softmax_causal_backward`: the peer of the C++ `softmax_backward`);
- causal linear attention backward (1 thread, n in {2048, 8192}): autograd through the chunked
  formula, minus its forward (`linear_causal_backward`, the peer of the C++ `linear_backward`);
- RoPE: HF-style rotate_half with cached cos/sin, applied to Q and K; and on bf16 and fp16 Q
  and K with the cache in that type, as HF's rotary does (`rope_qk_bf16`, `rope_qk_fp16`: the
  peers of the C++ `rope_split_half_qk_bfloat16` and `_half`);
- linear attention: non-causal (K^T V then Q S) and chunked causal (chunk 64: intra-chunk
  masked QK^T V plus the inter-chunk state), identity feature map, no normalisation — the same
  computation as the C++ `linear_simd` benchmark; and at n = 4096, 1 thread, end to end with
  1+elu features and RoPE on them (`linear_causal_rope`, as the C++ `linear_simd_rope`);
- decode: 64 one-token steps of causal linear attention with a state per head (1+elu, RoPE at
  the token's position, decay 0.99: S <- 0.99 S + k^T v, o = q S), batched over the 8 heads, as
  the C++ `linear_decode` benchmark; eager (`linear_decode_eager`) and through torch.compile
  (`linear_decode_compiled`, skipped if it fails; it needs a C++ compiler).

Bench-only: torch is never a dependency of the library or its tests. Install it into a venv
under build/ (e.g. `python3 -m venv build/venv && build/venv/bin/pip install torch`).
Prints the torch version and writes JSON (one record per case, median of `--reps` timings).

Usage: build/venv/bin/python bench/torch_peer.py [--out build/torch_peer.json] [--reps 5]
       [--sizes 512,8192] [--kernels rope_qk,rope_qk_bf16]  (only these cases; default: all)
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

H, D = 8, 64


def timed(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def rope_cache(n, d, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    t = torch.arange(n, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def softmax_attention(q, k, v, causal):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def softmax_forward_backward(q, k, v, d_out, causal):
    """Forward and backward through SDPA (autograd): dQ, dK, dV of <out, d_out>."""
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    softmax_attention(qg, kg, vg, causal).backward(d_out)
    return qg.grad, kg.grad, vg.grad


def linear_causal_forward_backward(q, k, v, d_out):
    """Forward and backward through the chunked causal formula (autograd): dQ, dK, dV."""
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    linear_causal_chunked(qg, kg, vg).backward(d_out)
    return qg.grad, kg.grad, vg.grad


def linear_noncausal(q, k, v):
    return q @ (k.transpose(-1, -2) @ v)


def linear_causal_chunked(q, k, v, chunk=64):
    b, h, n, d = q.shape
    out = torch.empty_like(v)
    state = torch.zeros(b, h, d, v.shape[-1], dtype=q.dtype)
    mask = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    for i0 in range(0, n, chunk):
        i1 = min(n, i0 + chunk)
        qc, kc, vc = q[..., i0:i1, :], k[..., i0:i1, :], v[..., i0:i1, :]
        a = (qc @ kc.transpose(-1, -2)).masked_fill(~mask[: i1 - i0, : i1 - i0], 0.0)
        out[..., i0:i1, :] = qc @ state + a @ vc
        state = state + kc.transpose(-1, -2) @ vc
    return out


def linear_causal_rope(q, k, v, cos, sin, chunk=64):
    """End to end: 1+elu features, HF-style RoPE on them, then chunked causal linear attention."""
    q, k = rope(F.elu(q) + 1, F.elu(k) + 1, cos, sin)
    return linear_causal_chunked(q, k, v, chunk)


def decode_step(q, k, v, s, cos, sin, decay):
    """One token of causal linear attention for every head: q, k, v (1, H, 1, D), state s (1, H, D, D)."""
    q, k = rope(F.elu(q) + 1, F.elu(k) + 1, cos, sin)
    s = s * decay + k.transpose(-1, -2) @ v
    return q @ s, s


def decode_tokens(step, tokens=64, decay=0.99):
    """A callable that runs `tokens` decode steps (state carried across calls, like the C++ bench)."""
    q, k, v = (torch.randn(1, H, tokens, 1, D) for _ in range(3))
    cos, sin = rope_cache(tokens, D)
    box = [torch.zeros(1, H, D, D)]

    def run():
        for t in range(tokens):
            _, box[0] = step(q[:, :, t], k[:, :, t], v[:, :, t], box[0], cos[t], sin[t], decay)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/torch_peer.json")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="512,2048,4096,8192")
    ap.add_argument("--kernels", default="", help="comma-separated case names to run (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.kernels.split(",")))
    wanted = lambda name: not only or name in only
    print(f"torch {torch.__version__} (SDPA: {hasattr(F, 'scaled_dot_product_attention')}, "
          f"cpu capability: {torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, 'cpu') else '?'})")
    sizes = [int(s) for s in args.sizes.split(",")]
    records = []
    torch.manual_seed(0)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for n in sizes:
            q, k, v = (torch.randn(1, H, n, D) for _ in range(3))
            cos, sin = rope_cache(n, D)
            qb, kb, cos_b, sin_b = (x.to(torch.bfloat16) for x in (q, k, cos, sin))
            qh, kh, cos_h, sin_h = (x.to(torch.float16) for x in (q, k, cos, sin))
            cases = {
                "softmax": lambda: softmax_attention(q, k, v, False),
                "softmax_causal": lambda: softmax_attention(q, k, v, True),
                "rope_qk": lambda: rope(q, k, cos, sin),
                "rope_qk_bf16": lambda: rope(qb, kb, cos_b, sin_b),
                "rope_qk_fp16": lambda: rope(qh, kh, cos_h, sin_h),
                "linear": lambda: linear_noncausal(q, k, v),
                "linear_causal": lambda: linear_causal_chunked(q, k, v),
            }
            if n == 4096 and threads == 1:
                cases["linear_causal_rope"] = lambda: linear_causal_rope(q, k, v, cos, sin)
            for name, fn in cases.items():
                if not wanted(name):
                    continue
                with torch.no_grad():
                    t = timed(fn, args.reps if n <= 4096 else max(1, args.reps // 2))
                records.append({"kernel": name, "n": n, "threads": threads, "seconds": t})
                print(f"{name:16s} n={n:5d} threads={threads}: {t * 1e3:9.2f} ms", flush=True)
            if threads == 1 and n <= 4096 and all(map(wanted, ("softmax_backward", "softmax", "softmax_causal"))):
                # the C++ softmax_backward's peer: SDPA forward + backward, minus the forward above
                d_out = torch.randn(1, H, n, D)
                for causal in (False, True):
                    name = "softmax_causal" if causal else "softmax"
                    fwd = next(r["seconds"] for r in records if r["kernel"] == name and r["n"] == n and r["threads"] == 1)
                    t = timed(lambda: softmax_forward_backward(q, k, v, d_out, causal), args.reps)
                    records.append({"kernel": name + "_fwd_bwd", "n": n, "threads": 1, "seconds": t})
                    records.append({"kernel": name + "_backward", "n": n, "threads": 1, "seconds": t - fwd})
                    print(f"{name + '_backward':16s} n={n:5d} threads=1: {(t - fwd) * 1e3:9.2f} ms "
                          f"(forward + backward {t * 1e3:.2f} ms)", flush=True)
            if threads == 1 and n in (2048, 8192) and all(map(wanted, ("linear_causal_backward", "linear_causal"))):
                # the C++ linear_backward's peer: autograd through the chunked formula, minus its forward
                d_out = torch.randn(1, H, n, D)
                fwd = next(r["seconds"] for r in records if r["kernel"] == "linear_causal" and r["n"] == n and r["threads"] == 1)
                t = timed(lambda: linear_causal_forward_backward(q, k, v, d_out), args.reps)
                records.append({"kernel": "linear_causal_backward", "n": n, "threads": 1, "seconds": t - fwd})
                print(f"{'linear_causal_backward':16s} n={n:5d} threads=1: {(t - fwd) * 1e3:9.2f} ms "
                      f"(forward + backward {t * 1e3:.2f} ms)", flush=True)
    torch.set_num_threads(1)
    decoders = {"linear_decode_eager": decode_step} if wanted("linear_decode_eager") else {}
    if wanted("linear_decode_compiled"):
        try:
            compiled = torch.compile(decode_step, dynamic=False)
            with torch.no_grad():
                decode_tokens(compiled)()  # compiles here, outside the timing
            decoders["linear_decode_compiled"] = compiled
        except Exception as e:  # no compiler, no inductor: the eager figure stands alone
            print(f"torch.compile unavailable for the decode step: {type(e).__name__}: {e}")
    for name, step in decoders.items():
        with torch.no_grad():
            t = timed(decode_tokens(step), args.reps)
        records.append({"kernel": name, "n": 64, "threads": 1, "seconds": t})
        print(f"{name:16s} 64 tokens threads=1: {t * 1e6 / 64:9.2f} us per token", flush=True)
    with open(args.out, "w") as f:
        json.dump({"torch_version": torch.__version__, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
