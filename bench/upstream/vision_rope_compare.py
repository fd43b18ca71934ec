#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's 2-D vision RoPE against transformers' own vision rotary code (issue 39's verification).

Cases: Qwen2-VL's vision tower (`Qwen2VLVisionRotaryEmbedding`, HF's "axial" rope: the same
frequencies for h and w; patch ids from `transformers.vision_utils.get_vision_position_ids` with
spatial_merge_size 2, images and a two-frame video) and Pixtral's (`PixtralVisionRotaryEmbedding`:
RoPE's even frequencies for h, odd for w; row-major patch ids, as its vision model builds them).
The script builds and runs bench/upstream/vision_rope_dump.cpp (lrpe's `vision_position_ids` and
`vision_rope_2d<double>`), then per case prints:
- ids:   lrpe's (h, w) against HF's position ids (integer equality);
- theta: lrpe's frequencies against HF's inv_freq formula evaluated in float64 (relative);
- rows:  lrpe's encoded rows against HF's `recomposition_frequencies` (the module's own layout of
         cos and sin) and `apply_rotary_pos_emb` (rotate_half), fed cos/sin of the angles
         position × theta in float64 (HF's forward casts to float32; the float64 angles isolate
         the layout and the pairing), as max |lrpe − hf| / (1 + max |hf|).
Bench-only (a venv with torch and transformers).

    python bench/upstream/vision_rope_compare.py [--cxx g++]
"""
import argparse
import json
import pathlib
import subprocess

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = [  # name, kind (0 repeated, 1 alternating), head_dim, base, merge, grids (t, h, w)
    ("qwen2_vl_vision", 0, 80, 10000.0, 2, [(1, 12, 16), (2, 8, 6), (1, 4, 4)]),
    ("pixtral", 1, 64, 10000.0, 1, [(1, 16, 24), (1, 7, 5)]),
]


def lrpe_dump(cxx, xs):
    exe = ROOT / "build" / "vision_rope_dump"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "vision_rope_dump.cpp"), "-o", str(exe)], check=True)
    lines = [str(len(CASES))]
    for (name, kind, d, base, merge, grids), x in zip(CASES, xs):
        lines.append(f"{name} {kind} {d} {base!r} {merge} {len(grids)} " + " ".join(f"{t} {h} {w}" for t, h, w in grids))
        lines.append(" ".join(repr(float(v)) for v in x.flatten().tolist()))
    inputs = ROOT / "build" / "vision_rope_inputs.txt"
    inputs.write_text("\n".join(lines) + "\n")
    return json.loads(subprocess.run([str(exe), str(inputs)], check=True, capture_output=True, text=True).stdout)


def hf_case(kind, d, base, merge, grids):
    from transformers.vision_utils import get_vision_position_ids
    if kind == 0:
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionRotaryEmbedding as Rotary
        from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb
        cfg = Qwen2VLVisionConfig(embed_dim=d * 2, num_heads=2, rope_parameters={"rope_type": "axial", "rope_theta": base})
        ids = get_vision_position_ids(torch.tensor(grids), merge)
        spatial = d // 2
        inv64 = 1.0 / (base ** (torch.arange(0, spatial, 2, dtype=torch.float64) / spatial))
    else:
        from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
        from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding as Rotary
        from transformers.models.pixtral.modeling_pixtral import apply_rotary_pos_emb
        cfg = PixtralVisionConfig(hidden_size=d * 2, num_attention_heads=2, head_dim=d,
                                  rope_parameters={"rope_type": "axial", "rope_theta": base})
        parts = []
        for _, h, w in grids:  # PixtralVisionModel.forward's meshgrid
            hp, wp = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            parts.append(torch.stack([hp.flatten(), wp.flatten()], dim=-1))
        ids = torch.cat(parts, dim=0)
        inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        inv64 = torch.cat([inv[0::2], inv[1::2]])
    return Rotary(cfg), apply_rotary_pos_emb, ids, inv64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="g++")
    args = ap.parse_args()
    import transformers
    gen = torch.Generator().manual_seed(39)
    xs = []
    for _, _, d, _, _, grids in CASES:
        rows = sum(t * h * w for t, h, w in grids)
        xs.append(torch.randn(rows, d, generator=gen, dtype=torch.float64))
    out = lrpe_dump(args.cxx, xs)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for (name, kind, d, base, merge, grids), x in zip(CASES, xs):
        rotary, apply, ids, inv64 = hf_case(kind, d, base, merge, grids)
        mine = out[name]
        ids_equal = np.array_equal(np.array(mine["ids"], dtype=np.int64).reshape(-1, 2), ids.numpy())
        # HF's module duplicates h's and w's halves of inv_freq per axis; lrpe's theta is (h's, w's)
        theta = np.array(mine["theta"])
        hf_theta = np.concatenate([inv64.numpy(), inv64.numpy()]) if kind == 0 else inv64.numpy()
        theta_err = np.abs(theta - hf_theta).max() / np.abs(hf_theta).max()
        freqs = ids[..., None].double() * inv64  # (rows, 2, d/4)
        cos = rotary.recomposition_frequencies(freqs.cos())
        sin = rotary.recomposition_frequencies(freqs.sin())
        q, _ = apply(x[None, None], x[None, None], cos[None], sin[None])
        hf_rows = q[0, 0].numpy()
        lr_rows = np.array(mine["out"]).reshape(hf_rows.shape)
        err = np.abs(lr_rows - hf_rows).max() / (1 + np.abs(hf_rows).max())
        print(f"{name:16s} rows {hf_rows.shape[0]:4d}  ids {'equal' if ids_equal else 'DIFFER'}  "
              f"theta {theta_err:.1e}  rows {err:.1e}")


if __name__ == "__main__":
    main()
