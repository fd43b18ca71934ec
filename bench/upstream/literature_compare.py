#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's absolute and 2-D encodings against transformers' own code (issue 41's verification).

Builds and runs bench/upstream/literature_dump.cpp, then compares, per table:
- Vaswani's sinusoidal table: DistilBERT's `_create_sinusoidal_embeddings` (which rounds to
  float32), and the same numpy expression in float64 (`pos / 10000 ** (2 (j // 2) / d)`, one
  rounded angle; lrpe's angles are exact);
- tensor2tensor's table: M2M100's `SinusoidalPositionalEmbedding.get_embedding` (float32), and
  its expression in float64;
- Swin's relative_position_index: `SwinRelativePositionBias._create_relative_position_index`,
  integer equality;
- Reformer's axial table: `AxialPositionEmbeddings.forward` (eval mode) with the same weights.
Prints max |lrpe - hf| per case. Bench-only (a venv with torch and transformers).

    python bench/upstream/literature_compare.py [--cxx g++]
"""
import argparse
import json
import pathlib
import subprocess

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
N, D = 2048, 64
WINDOWS = [(2, 2), (2, 3), (7, 7), (12, 5)]
AXIAL = (8, 16, 24, 40)  # n1 n2 d1 d2


def lrpe_tables(cxx, e1, e2):
    exe = ROOT / "build" / "literature_dump"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "literature_dump.cpp"), "-o", str(exe)], check=True)
    inputs = ROOT / "build" / "literature_inputs.txt"
    lines = [f"{N} {D}", f"{len(WINDOWS)} " + " ".join(f"{h} {w}" for h, w in WINDOWS), " ".join(map(str, AXIAL)),
             " ".join(repr(float(x)) for x in e1.flatten().tolist()),
             " ".join(repr(float(x)) for x in e2.flatten().tolist())]
    inputs.write_text("\n".join(lines) + "\n")
    return json.loads(subprocess.run([str(exe), str(inputs)], check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="g++")
    args = ap.parse_args()
    from transformers import ReformerConfig
    from transformers.models.distilbert.modeling_distilbert import _create_sinusoidal_embeddings
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding
    from transformers.models.reformer.modeling_reformer import AxialPositionEmbeddings
    from transformers.models.swin.modeling_swin import SwinRelativePositionBias

    n1, n2, d1, d2 = AXIAL
    cfg = ReformerConfig(axial_pos_shape=(n1, n2), axial_pos_embds_dim=(d1, d2), hidden_size=d1 + d2,
                         max_position_embeddings=n1 * n2, hidden_dropout_prob=0.0)
    axial = AxialPositionEmbeddings(cfg).double().eval()
    gen = torch.Generator().manual_seed(41)
    with torch.no_grad():
        for w in axial.weights:
            w.copy_(torch.randn(w.shape, generator=gen, dtype=torch.float64))
    e1 = axial.weights[0].reshape(n1, d1).detach().numpy()
    e2 = axial.weights[1].reshape(n2, d2).detach().numpy()
    got = lrpe_tables(args.cxx, e1, e2)

    def report(name, mine, theirs):
        diff = float(np.max(np.abs(np.asarray(mine, dtype=np.float64).reshape(theirs.shape) - theirs)))
        print(f"{name:48s} max |lrpe - hf| = {diff:.3g}")

    out = torch.empty(N, D, dtype=torch.float64)
    _create_sinusoidal_embeddings(N, D, out)
    report(f"Vaswani, DistilBERT's table (float32), {N} x {D}", got["vaswani"], out.numpy())
    pos_enc = np.array([[p / np.power(10000, 2 * (j // 2) / D) for j in range(D)] for p in range(N)])
    ref64 = np.empty_like(pos_enc)
    ref64[:, 0::2], ref64[:, 1::2] = np.sin(pos_enc[:, 0::2]), np.cos(pos_enc[:, 1::2])
    report("Vaswani, the same expression in float64", got["vaswani"], ref64)
    t2t = M2M100SinusoidalPositionalEmbedding.get_embedding(N, D).double().numpy()
    report(f"tensor2tensor, M2M100's get_embedding (float32)", got["t2t"], t2t)
    half = D // 2
    freq = np.exp(np.arange(half, dtype=np.float64) * -(np.log(10000.0) / (half - 1)))
    ang = np.arange(N, dtype=np.float64)[:, None] * freq[None, :]
    report("tensor2tensor, the same expression in float64", got["t2t"], np.concatenate([np.sin(ang), np.cos(ang)], 1))
    for h, w in WINDOWS:
        idx = SwinRelativePositionBias(1, (h, w))._create_relative_position_index().numpy().astype(np.float64)
        report(f"Swin relative_position_index {h} x {w}", got[f"swin_{h}x{w}"], idx)
    with torch.no_grad():
        ids = torch.arange(n1 * n2).unsqueeze(0)
        hf = axial(ids)[0].numpy()
    report(f"Reformer axial ({n1}, {n2}) x ({d1}, {d2})", got["axial"], hf)


if __name__ == "__main__":
    main()
