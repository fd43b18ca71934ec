#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One table of the CUDA backend's numbers against the issue-5 targets (bench/results/history.md, GPU checklist).

Reads bench_cuda's Google Benchmark JSON and, optionally, bench/torch_gpu_peer.py's
results.json (same device, same run), and prints:
  - the device-to-device copy bandwidth (read + write), bench_cuda's and torch's;
  - every encoder's GB/s and fraction of that copy (target >= 0.7 for rope_neox, type1, type4,
    type8 at d = 128);
  - softmax attention TFLOP/s beside torch SDPA's (FlashAttention backend) on the same shapes,
    and their ratio;
  - causal linear attention's time against n and t(2n)/t(n) (linear scaling: about 2).

Usage: python3 bench/cuda_summary.py bench_cuda.json [--torch torch_peer/results.json] [--markdown]
"""
import argparse
import json
import re


def load_runs(path):
    with open(path) as f:
        doc = json.load(f)
    runs = []
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        runs.append(b)
    return doc.get("context", {}), runs


def parse_name(name):
    """'cuda_softmax<__nv_bfloat16>/d:64/n:1024/causal:0/iterations:20/manual_time' ->
    ('cuda_softmax', '__nv_bfloat16', {'d': 64, 'n': 1024, 'causal': 0}, [plain args])."""
    m = re.match(r"(\w+)(?:<([^>]*)>)?((?:/[^/]+)*)", name)
    kernel, dtype, rest = m.group(1), m.group(2) or "", m.group(3)
    named, plain = {}, []
    for part in rest.strip("/").split("/"):
        if not part or part.startswith("iterations:") or part in ("manual_time", "real_time"):
            continue
        if ":" in part:
            k, v = part.split(":", 1)
            named[k] = int(v)
        else:
            plain.append(int(part))
    return kernel, dtype, named, plain


DTYPE = {"float": "fp32", "__nv_bfloat16": "bf16", "__half": "fp16"}


def table(rows, header, markdown):
    rows = [[str(x) for x in r] for r in rows]
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w[i]) for i, h in enumerate(header)))
    for r in rows:
        print("  ".join(x.rjust(w[i]) for i, x in enumerate(r)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("--torch", help="bench/torch_gpu_peer.py's results.json")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    context, runs = load_runs(args.bench_json)
    peer = {}
    if args.torch:
        with open(args.torch) as f:
            peer = json.load(f)
    print(f"device: {peer.get('device', '?')}; torch {peer.get('torch', '?')}; "
          f"host {context.get('host_name', '?')}, {context.get('date', '?')}")

    copy = next((r for r in runs if r["name"].startswith("cuda_copy")), None)
    copy_gbps = copy["GB_per_s"] if copy else None
    print(f"device-to-device copy (read + write): bench_cuda {copy_gbps and round(copy_gbps)} GB/s, "
          f"torch {peer.get('copy_GBps') and round(peer['copy_GBps'])} GB/s")

    enc_rows = []
    for r in runs:
        kernel, dtype, named, _ = parse_name(r["name"])
        if kernel != "cuda_encode":
            continue
        frac = r.get("frac_copy")
        enc_rows.append([r.get("label", named.get("preset")), DTYPE.get(dtype, dtype), f"{r['median_ms']:.3f}",
                         f"{r['GB_per_s']:.0f}", f"{frac:.2f}", "MET" if frac >= 0.7 else "missed"])
    if enc_rows:
        print("\nencoders: Q and K, 2^20 rows each, d = 128 (target >= 0.7 of the copy)")
        table(enc_rows, ["preset", "dtype", "ms", "GB/s", "frac_copy", "target"], args.markdown)

    sdpa = {(s["d"], s["n"], bool(s["causal"])): s for s in peer.get("sdpa", [])}
    sm_rows = []
    for r in runs:
        kernel, dtype, named, _ = parse_name(r["name"])
        if kernel != "cuda_softmax":
            continue
        key = (named["d"], named["n"], bool(named["causal"]))
        ours = r["TFLOP_per_s"]
        theirs = sdpa.get(key, {}).get("TFLOP/s")
        sm_rows.append([key[0], key[1], int(key[2]), DTYPE.get(dtype, dtype), f"{r['median_ms']:.3f}", f"{ours:.2f}",
                        "—" if theirs is None else f"{theirs:.1f}",
                        "—" if theirs is None else f"{ours / theirs:.3f}"])
    if sm_rows:
        print("\nsoftmax attention (batch max(1, 16384/n), 16 heads, BNSH) against torch SDPA (FlashAttention)")
        table(sm_rows, ["d", "n", "causal", "dtype", "ms", "TFLOP/s", "SDPA TFLOP/s", "ours/SDPA"], args.markdown)

    lin = {}
    for r in runs:
        kernel, dtype, _, plain = parse_name(r["name"])
        if kernel == "cuda_linear_causal":
            lin.setdefault(DTYPE.get(dtype, dtype), []).append((plain[0], r["median_ms"]))
    if lin:
        print("\ncausal linear attention (1 x 16 heads, d = 64, 1+elu, rope_neox, decay 0.99): t(2n)/t(n) ~ 2 is linear")
        rows = []
        for dtype, pts in sorted(lin.items()):
            pts.sort()
            for i, (n, ms) in enumerate(pts):
                prev = pts[i - 1] if i > 0 and pts[i - 1][0] * 2 == n else None
                rows.append([dtype, n, f"{ms:.3f}", f"{ms * 1e6 / n:.1f}", "—" if prev is None else f"{ms / prev[1]:.2f}"])
        table(rows, ["dtype", "n", "ms", "ns/row", "t(n)/t(n/2)"], args.markdown)


if __name__ == "__main__":
    main()
