#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's sineSPE and convSPE against the authors' reference code (issue 41's verification).

The reference (aliutkus/spe, src/pytorch/spe/spe.py: SineSPE, ConvSPE, SPEFilter) draws its
noise with torch.randn; lrpe draws with its own documented generator. To compare the
computations, this script builds and runs bench/upstream/spe_dump.cpp, which prints the normals
lrpe's draws used and lrpe's features φ_q, φ_k of random q, k; then it runs the reference in
float64 with torch.randn returning those same normals (sineSPE's Z and the gate's noise; for
convSPE, lrpe's n + K − 1 samples placed where the reference's longer signal is read), and
prints max |lrpe − reference| of the gated features. Bench-only (a venv with torch).

    python bench/upstream/spe_compare.py --reference PATH/TO/spe.py [--cxx g++]
"""
import argparse
import importlib.util
import json
import pathlib
import subprocess

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
D, K, R, N, SEED, TAPS = 4, 3, 16, 20, 7, 5


def lrpe_dump(cxx, lines):
    exe = ROOT / "build" / "spe_dump"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "spe_dump.cpp"), "-o", str(exe)], check=True)
    inputs = ROOT / "build" / "spe_inputs.txt"
    inputs.write_text("\n".join(lines) + "\n")
    return json.loads(subprocess.run([str(exe), str(inputs)], check=True, capture_output=True, text=True).stdout)


def words(x):
    return " ".join(repr(float(v)) for v in np.asarray(x).flatten().tolist())


class PresetRandn:
    """torch.randn that returns the given tensors, in order (the reference calls it twice)."""

    def __init__(self, tensors):
        self.tensors, self.real = list(tensors), torch.randn

    def __call__(self, *shape, **kw):
        t = self.tensors.pop(0)
        size = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape
        assert tuple(t.shape) == tuple(size), (t.shape, size)
        return t.to(kw.get("device") or "cpu")


def reference_features(spe_mod, module, q, k, z, eps, gate):
    filt = spe_mod.SPEFilter(gated=True, code_shape=(1, D)).double()
    with torch.no_grad():
        filt.gate.copy_(torch.tensor(gate).view(1, D))
        torch.randn = PresetRandn([z, eps])
        try:
            code = module((1, N))
            qhat, khat = filt(torch.tensor(q).view(1, N, 1, D), torch.tensor(k).view(1, N, 1, D), code)
        finally:
            torch.randn = torch.randn.real
    return qhat.view(N, R).numpy(), khat.view(N, R).numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help="the reference's src/pytorch/spe/spe.py")
    ap.add_argument("--cxx", default="g++")
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("spe_reference", args.reference)
    spe_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spe_mod)
    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(41)
    freqs, offsets, gains = (rng.normal(size=(D, K)) for _ in range(3))
    freqs -= 2
    gate = rng.normal(size=D)
    a, b = rng.normal(size=(D, TAPS)), rng.normal(size=(D, TAPS))
    q, k = rng.normal(size=(N, D)), rng.normal(size=(N, D))
    out = lrpe_dump(args.cxx, [f"{D} {K} {R} {N} {SEED}", words(freqs), words(offsets), words(gains), words(gate),
                               str(TAPS), words(a), words(b), words(q), words(k)])

    sine = spe_mod.SineSPE(num_heads=1, in_features=D, num_realizations=R, num_sines=K).double()
    conv = spe_mod.ConvSPE(ndim=1, num_heads=1, in_features=D, num_realizations=R, kernel_size=TAPS).double()
    with torch.no_grad():
        sine.freqs.copy_(torch.tensor(freqs).view(1, D, K))
        sine.offsets.copy_(torch.tensor(offsets).view(1, D, K))
        sine.gains.copy_(torch.tensor(gains).view(1, D, K))
        conv.conv_k.weight.copy_(torch.tensor(a).view(D, 1, TAPS))  # the reference's conv_k makes q̄
        conv.conv_q.weight.copy_(torch.tensor(b).view(D, 1, TAPS))
    eps = lambda key: torch.tensor(out[key]).view(1, D, R)
    # sineSPE: Z as (1, heads, D, 2K, R), lrpe's order (d, Z's row, r)
    sz = torch.tensor(out["sine_z"]).view(1, 1, D, 2 * K, R)
    sq, sk = reference_features(spe_mod, sine, q, k, sz, eps("sine_eps"), gate)
    # convSPE: the reference reads its signal at [K, K + n + K − 1); lrpe's samples go there
    cz = torch.zeros(R, D, N + 4 * TAPS)
    samples = torch.tensor(out["conv_z"]).view(D, R, N + TAPS - 1)
    cz[:, :, TAPS:TAPS + N + TAPS - 1] = samples.permute(1, 0, 2)
    cq, ck = reference_features(spe_mod, conv, q, k, cz, eps("conv_eps"), gate)
    for name, ours, theirs in [("sineSPE phi_q", "sine_phi_q", sq), ("sineSPE phi_k", "sine_phi_k", sk),
                               ("convSPE phi_q", "conv_phi_q", cq), ("convSPE phi_k", "conv_phi_k", ck)]:
        mine = np.array(out[ours]).reshape(N, R)
        print(f"{name:16s} max |lrpe - reference| = {np.abs(mine - theirs).max():.3g}"
              f"  (max |reference| = {np.abs(theirs).max():.3g})")


if __name__ == "__main__":
    main()
