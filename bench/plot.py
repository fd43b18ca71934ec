#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Log-log plot of time vs n for softmax and linear attention (SIMD, reference, Eigen, PyTorch,
ggml) from a bench_simd_attention JSON run and optionally torch_peer.py's and ggml_peer's JSON.

Usage: build/venv/bin/python bench/plot.py build/simd_attention.json [build/torch_peer.json] \
           [--ggml build/ggml_peer.json] --out docs/img/perf_attention.png
Needs matplotlib (bench-only; e.g. build/venv/bin/pip install matplotlib).
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from summary import load_bench, load_peer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("torch", nargs="?")
    ap.add_argument("--ggml")
    ap.add_argument("--out", default="docs/img/perf_attention.png")
    args = ap.parse_args()
    _, b = load_bench(args.bench)
    torch_recs = load_peer(args.torch)[0] if args.torch else {}
    ggml_recs = load_peer(args.ggml)[0] if args.ggml else {}

    sizes = [512, 2048, 4096, 8192, 16384]

    def series(fmt):
        xs, ys = [], []
        for n in sizes:
            name = fmt.format(n=n)
            if name in b:
                xs.append(n)
                ys.append(b[name]["seconds"] * 1e3)
        return xs, ys

    fig, ax = plt.subplots(figsize=(8, 5.5))
    lines = [
        ("softmax simd", "softmax_simd/{n}/0/1", "C0", "-"),
        ("softmax simd causal", "softmax_simd/{n}/1/1", "C0", "--"),
        ("softmax simd, 2 threads", "softmax_simd/{n}/0/2", "C0", ":"),
        ("softmax reference", "softmax_reference/{n}/0", "C1", "-"),
        ("softmax plain Eigen", "softmax_eigen/{n}", "C2", "-"),
        ("linear simd", "linear_simd/{n}/0/1", "C3", "-"),
        ("linear simd causal", "linear_simd/{n}/1/1", "C3", "--"),
        ("linear reference causal", "linear_reference/{n}/1", "C4", "--"),
    ]
    for label, fmt, color, style in lines:
        xs, ys = series(fmt)
        if xs:
            ax.plot(xs, ys, style, color=color, marker="o", label=label)
    for recs, label, kern, color, style in (
            (torch_recs, "softmax PyTorch SDPA", "softmax", "C5", "-"),
            (torch_recs, "softmax PyTorch SDPA causal", "softmax_causal", "C5", "--"),
            (torch_recs, "linear PyTorch chunked causal", "linear_causal", "C6", "--"),
            (ggml_recs, "softmax ggml flash attention", "softmax", "C7", "-"),
            (ggml_recs, "softmax ggml flash attention causal", "softmax_causal", "C7", "--")):
        pts = sorted((n, s * 1e3) for (k, n, thr), s in recs.items() if k == kern and thr == 1)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, marker="s", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length n (batch 1, 8 heads, d = 64, fp32)")
    ax.set_ylabel("time per call [ms]")
    ax.set_title("lrpe attention: time vs n (1 thread unless noted)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
