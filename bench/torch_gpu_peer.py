#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peers of lrpe's CUDA kernels, for the GPU machine (H100/H200).

What it does (bench/results/history.md, "GPU checklist"):
  1. rope   : HF LLaMA rotary (transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb,
              split-half = lrpe::rope_neox) on random bf16/fp16/fp32 Q, K at positions with a
              large offset: times it (ms, GB/s of q and k read + written) and measures its
              error against the exact rotary (float64 angles) from position 0 and from
              999000. lrpe's side of that comparison is test_cuda_kernels (cuda::encode against
              the CPU library in double, positions from 999983).
  2. sdpa   : torch.nn.functional.scaled_dot_product_attention (FlashAttention backend forced
              with torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)) at
              n in {1024, 4096, 16384}, d in {64, 128}, causal and not, bf16; TFLOP/s with
              4·n²·d·heads·batch flops (halved when causal), median of CUDA-event timings.
  3. copy   : measured device-to-device copy bandwidth (bytes read + written), the ceiling
              for the encoder target (lrpe encoder >= 0.7 of it).
  4. compare: lrpe's CUDA softmax attention and rope_neox encode (bench/cuda_peer_io.cu, whose
              binary --lrpe-io names) on the inputs this script writes, against torch's SDPA
              (FlashAttention for bf16) and HF's rotary on the same inputs, each against float64;
              fails if lrpe is off float64 by more than its test bound.

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


def rope_reference(q, pos, d, base=10000.0):
    """The exact split-half rotary (lrpe::rope_neox) in float64: angles pos·θ_i formed in double."""
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=q.device, dtype=torch.float64) / d))
    ang = pos.to(torch.float64)[..., None] * inv  # [b, n, d/2]; |error| ~ 1e-10 rad at 1e6
    cos, sin = torch.cat((ang, ang), -1).cos()[:, None], torch.cat((ang, ang), -1).sin()[:, None]
    x = q.to(torch.float64)
    rotated = torch.cat((-x[..., d // 2:], x[..., : d // 2]), -1)
    return x * cos + rotated * sin


def rel_error(got, ref):
    return (torch.linalg.vector_norm(got.to(torch.float64) - ref) / torch.linalg.vector_norm(ref)).item()


def rope_part(results):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, LlamaRotaryEmbedding
    from transformers import LlamaConfig

    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        b, h, n, d = 4, 32, 4096, 128
        # the default rope_theta (10000) of every transformers version: no version-specific keyword
        cfg = LlamaConfig(hidden_size=h * d, num_attention_heads=h, max_position_embeddings=1 << 20)
        rot = LlamaRotaryEmbedding(config=cfg).to("cuda")  # no device= (gone after transformers 5.17)
        g = torch.Generator(device="cuda").manual_seed(1234)
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
        k = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
        row = {"dtype": str(dtype).replace("torch.", ""), "b": b, "h": h, "n": n, "d": d}
        # HF's own accuracy against the exact rotary (float64 angles), near 0 and from 999000:
        # its float32 pos·inv_freq loses ~|pos|·2^-24 rad at large positions (REFERENCE.md)
        for start in (0, 999_000):
            pos = (torch.arange(n, device="cuda") + start).unsqueeze(0).expand(b, n)
            cos, sin = rot(q, pos)
            qo, _ = apply_rotary_pos_emb(q, k, cos, sin)
            row[f"err_vs_exact_from_{start}"] = rel_error(qo, rope_reference(q, pos, d))
        pos = (torch.arange(n, device="cuda") + 999_000).unsqueeze(0).expand(b, n)

        def run():
            cos, sin = rot(q, pos)
            return apply_rotary_pos_emb(q, k, cos, sin)

        row["ms"] = timed(run)
        moved = 2 * 2 * q.numel() * q.element_size()  # q and k, read + write
        row["GB/s"] = moved / (row["ms"] * 1e-3) / 1e9
        rows.append(row)
    results["rope"] = rows
    print("HF LLaMA rotary (q and k; timed at positions from 999000; error of q against exact float64 angles)")
    for r in rows:
        print(f"  {r['dtype']:9s} b{r['b']} h{r['h']} n{r['n']} d{r['d']}: {r['ms']:.3f} ms  {r['GB/s']:.0f} GB/s"
              f"  rel. error from 0: {r['err_vs_exact_from_0']:.2e}, from 999000: {r['err_vs_exact_from_999000']:.2e}")


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


def compare_part(binary, results):
    """lrpe's CUDA softmax attention and rope_neox encode (bench/cuda_peer_io.cu) against torch's
    SDPA and HF's rotary on the same inputs, each also against float64 (rel. L2 errors). Exits
    non-zero if lrpe is off float64 by more than one rounding of the storage type plus fp32's
    arithmetic (2^-8 + 1e-5 bf16, 1e-5 fp32), the bound of tests/test_cuda_kernels.cu."""
    import subprocess
    import tempfile

    import numpy as np
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, LlamaRotaryEmbedding
    from transformers import LlamaConfig

    b, h, n, d = 2, 8, 1024, 128
    g = torch.Generator().manual_seed(11)
    x32 = {name: torch.randn(b, h, n, d, generator=g) for name in "qkv"}
    x16 = {name: t.to(torch.bfloat16) for name, t in x32.items()}
    bound = {"bf16": 2.0 ** -8 + 1e-5, "f32": 1e-5}
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as work:
        for name in "qkv":
            x16[name].view(torch.int16).numpy().tofile(os.path.join(work, f"{name}_bf16.bin"))
            x32[name].numpy().tofile(os.path.join(work, f"{name}_f32.bin"))
        subprocess.run([binary, work, str(b), str(h), str(n), str(d)], check=True)

        def lrpe_out(stem, dtype):
            raw = np.fromfile(os.path.join(work, stem + ".bin"), dtype=np.int16 if dtype == "bf16" else np.float32)
            t = torch.from_numpy(raw)
            return (t.view(torch.bfloat16) if dtype == "bf16" else t).reshape(b, h, n, d).cuda()

        cfg = LlamaConfig(hidden_size=h * d, num_attention_heads=h, max_position_embeddings=1 << 20)
        rot = LlamaRotaryEmbedding(config=cfg).to("cuda")  # no device= (gone after transformers 5.17)
        for dtype, xs in (("bf16", x16), ("f32", x32)):
            q, k, v = (xs[c].cuda() for c in "qkv")
            for causal in (False, True):
                exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
                if dtype == "bf16":
                    from torch.nn.attention import sdpa_kernel, SDPBackend
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        peer = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                else:
                    peer = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ours = lrpe_out(f"softmax_{dtype}_causal{int(causal)}", dtype)
                rows.append({"what": f"softmax causal={int(causal)}", "dtype": dtype,
                             "lrpe_vs_exact": rel_error(ours, exact), "torch_vs_exact": rel_error(peer, exact),
                             "lrpe_vs_torch": rel_error(ours, peer.double())})
            for start in (0, 999_000):
                pos = (torch.arange(n, device="cuda") + start).unsqueeze(0).expand(b, n)
                cos, sin = rot(q, pos)
                peer, _ = apply_rotary_pos_emb(q, k, cos, sin)
                exact = rope_reference(q, pos, d)
                ours = lrpe_out(f"rope_{dtype}_{start}", dtype)
                rows.append({"what": f"rope_neox from {start}", "dtype": dtype,
                             "lrpe_vs_exact": rel_error(ours, exact), "torch_vs_exact": rel_error(peer, exact),
                             "lrpe_vs_torch": rel_error(ours, peer.double())})
    print(f"lrpe CUDA vs torch on the same inputs (b{b} h{h} n{n} d{d}, BNSH; rel. L2 errors; exact = float64)")
    for r in rows:
        ok = r["lrpe_vs_exact"] <= bound[r["dtype"]]
        failed = failed or not ok
        r["within_bound"] = ok
        print(f"  {r['what']:22s} {r['dtype']:4s}: lrpe {r['lrpe_vs_exact']:.2e} ({'ok' if ok else 'OVER'} "
              f"{bound[r['dtype']]:.1e}), torch {r['torch_vs_exact']:.2e}, lrpe vs torch {r['lrpe_vs_torch']:.2e}")
    results["compare"] = rows
    return not failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--parts", default="copy,rope,sdpa,compare")
    ap.add_argument("--lrpe-io", default="build/cuda/bench/cuda_peer_io",
                    help="bench/cuda_peer_io.cu's binary, for the compare part (skipped if missing)")
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
        try:
            rope_part(results)
        except Exception as e:  # an API change in transformers must not cost the SDPA numbers
            results["rope_error"] = repr(e)
            print(f"rope part FAILED: {e!r}")
    if "sdpa" in parts:
        sdpa_part(results)
    ok = True
    if "compare" in parts:
        if os.path.exists(args.lrpe_io):
            ok = compare_part(args.lrpe_io, results)
        else:
            print(f"compare part skipped: no {args.lrpe_io} (build bench/cuda_peer_io.cu)")
    if args.out:
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    if not ok:
        raise SystemExit("lrpe's CUDA output is off float64 by more than its bound (compare part)")


if __name__ == "__main__":
    main()
