#!/usr/bin/env python3
"""PyTorch peers of lrpe's CUDA kernels, for the GPU machine (H100/H200). NOT run yet.

What it does (docs/cuda.md, "GPU checklist"):
  1. rope   : HF LLaMA rotary (transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb,
              split-half = lrpe::rope_neox) on random bf16/fp16/fp32 Q, K at positions with a
              large offset; writes q, k, positions and torch's outputs as .npy under --out so
              the C++ side (lrpe::cuda::encode with rope_neox) can be compared, and times the
              torch rotary (ms, GB/s) beside a device-to-device copy of the same bytes.
  2. sdpa   : torch.nn.functional.scaled_dot_product_attention (FlashAttention backend forced
              with torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)) at
              n in {1024, 4096, 16384}, d in {64, 128}, causal and not, bf16; TFLOP/s with
              4·n²·d·heads·batch flops (halved when causal), median of CUDA-event timings.
  3. copy   : measured device-to-device copy bandwidth (bytes read + written), the ceiling
              for the encoder target (lrpe encoder >= 0.7 of it).

Usage on the device machine:
  PYTHONUNBUFFERED=1 python3 bench/torch_gpu_peer.py --out $OUT/torch_peer
Prints one table per part; the same numbers go to $OUT/torch_peer/results.json.
"""
import argparse
import json
import math
import os
import statistics

import torch


def timed(fn, warmup=10, reps=50):
    """Median milliseconds of fn() over reps CUDA-event timed runs, after warmup."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(nbytes=1 << 30):
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e9  # GB/s, read + write


def rope_part(out, results):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, LlamaRotaryEmbedding
    from transformers import LlamaConfig

    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        b, h, n, d = 4, 32, 4096, 128
        cfg = LlamaConfig(hidden_size=h * d, num_attention_heads=h, max_position_embeddings=1 << 20, rope_theta=10000.0)
        rot = LlamaRotaryEmbedding(config=cfg, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(1234)
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
        k = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
        pos = (torch.arange(n, device="cuda") + 999_000).unsqueeze(0).expand(b, n)
        def run():
            cos, sin = rot(q, pos)
            return apply_rotary_pos_emb(q, k, cos, sin)
        qo, ko = run()
        ms = timed(run)
        moved = 2 * 2 * q.numel() * q.element_size()  # q and k, read + write
        name = str(dtype).replace("torch.", "")
        if out:
            import numpy as np
            np.save(os.path.join(out, f"rope_q_{name}.npy"), q.float().cpu().numpy())
            np.save(os.path.join(out, f"rope_qo_{name}.npy"), qo.float().cpu().numpy())
        rows.append({"dtype": name, "b": b, "h": h, "n": n, "d": d, "ms": ms, "GB/s": moved / (ms * 1e-3) / 1e9})
    results["rope"] = rows
    print("HF LLaMA rotary (q and k, positions from 999000)")
    for r in rows:
        print(f"  {r['dtype']:9s} b{r['b']} h{r['h']} n{r['n']} d{r['d']}: {r['ms']:.3f} ms  {r['GB/s']:.0f} GB/s")


def sdpa_part(results):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend

    rows = []
    for d in (64, 128):
        for n in (1024, 4096, 16384):
            for causal in (False, True):
                b, h = max(1, 16384 // n), 16
                q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
                k, v = torch.randn_like(q), torch.randn_like(q)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                flops = 4 * b * h * n * n * d / (2 if causal else 1)
                rows.append({"d": d, "n": n, "b": b, "h": h, "causal": causal, "ms": ms,
                             "TFLOP/s": flops / (ms * 1e-3) / 1e12})
    results["sdpa"] = rows
    print("torch SDPA (FlashAttention backend), bf16")
    for r in rows:
        print(f"  d{r['d']:4d} n{r['n']:6d} b{r['b']:3d} h{r['h']} causal={int(r['causal'])}: "
              f"{r['ms']:.3f} ms  {r['TFLOP/s']:.1f} TFLOP/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--parts", default="copy,rope,sdpa")
    args = ap.parse_args()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    try:
        import transformers
        results["transformers"] = transformers.__version__
    except ImportError:
        results["transformers"] = None
    print(f"device {results['device']}, torch {results['torch']}, transformers {results['transformers']}")
    parts = args.parts.split(",")
    if "copy" in parts:
        results["copy_GBps"] = copy_bandwidth()
        print(f"device-to-device copy: {results['copy_GBps']:.0f} GB/s (read + write)")
    if "rope" in parts:
        rope_part(args.out, results)
    if "sdpa" in parts:
        sdpa_part(results)
    if args.out:
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
