#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's multi-axis RoPE (interop::multi_axis_rope) against transformers' own Qwen2-VL,
Qwen2.5-VL and Qwen3-VL rotary code (M-RoPE).

Draws each case's queries and keys (float64, N(0, 1), seeded; batch 2, 2 query heads, 1 key
head), takes its position ids (3, batch, seq) from the model's own `get_rope_index` on a
text + image + video sequence (a tiny model instance of the real class: 1 text layer, 1 vision
block; the released text geometry, head_dim 128) or draws every axis independently, writes the
rows and their (t, h, w) as text, builds and runs bench/upstream/mrope_dump.cpp (lrpe's
`multi_axis_rope<double>(head_dim, base, mrope_section, layout)`, HF's rotate_half pairing, the
reference backend) and recomputes every case with the model's own code:
`<Model>RotaryEmbedding.recomposition_frequencies` (the per-axis selection of the frequencies:
Qwen2-VL and Qwen2.5-VL split the head_dim/2 frequencies into `mrope_section` runs, run i
taking axis i; Qwen3-VL's `Qwen3VLTextRotaryEmbedding` interleaves, frequency j taking height
when j = 1 mod 3 and j < 3*section[1], width when j = 2 mod 3 and j < 3*section[2], time
otherwise) and then the model's `apply_rotary_pos_emb` (rotate_half). In transformers 5.24
there is no `apply_multimodal_rotary_pos_emb` nor `apply_interleaved_mrope` any more: the
section split moved into the rotary module's `recomposition_frequencies`.

HF's rotary modules compute inv_freq and cos/sin in float32 (`dtype=torch.float`, `.float()`),
so the per-axis angles are computed here, from HF's formulas, in float64; what goes through
HF's own code is the (3, batch, seq, head_dim/2) cos and sin. Per case it prints
max |lrpe - hf| / (1 + max |hf|) over the encoded q and k rows, for three HF-side angles:
- exact:  cos/sin of the exact product s*theta (mpmath, 256 bits, rounded once to double) at
          lrpe's frequencies theta. Gated at 1e-12: the layout, the pairing and the angles.
- hf64:   HF's forward formula in float64 as it stands: inv_freq = 1 / base^(arange(0, d, 2) / d)
          in float64, freqs = position_ids[..., None] * inv_freq (one rounded product), torch's
          cos/sin. HF's own float64 error is then up to max|s| * 2^-53 in the angle, plus up to one
          ulp of theta (its 1/base^x against lrpe's base^-x) times s: about 1e-11 at s = 1e5.
          Gated at 1e-12 + max|s| * 2^-51 (the bound of those two roundings).
- fp32:   the model's rotary module as shipped (`forward`, float32 inv_freq and cos/sin), only
          printed: float32 angles, ~1e-7 at small positions and ~1e-2 at s = 1e5.
The frequencies are compared too: lrpe's theta (std::pow(base, -2k/d)) against HF's inv_freq
formula in float64, gated at 2 ulp (4.5e-16 relative); the module's float32 inv_freq printed.

Cases: the three models with their released rotary settings (Qwen2-VL, Qwen2.5-VL: base 1e6,
mrope_section [16, 24, 24]; Qwen3-VL: base 5e6, [24, 20, 20], interleaved), each with
get_rope_index's ids (image grid (1, 12, 16) and video (2, 8, 12) in one sequence, an image
(1, 20, 8) in a left-padded second one; Qwen2.5-VL's video at 2 s per grid, t step 8; Qwen3-VL's
video frames between timestamp tokens) and with those ids shifted by a long text prefix
(100000 tokens: every axis + 100000, exactly what get_rope_index gives after such a prefix;
Qwen3-VL also + 1000000); then every axis drawn independently (so that a wrong axis shows),
also with sections HF's configs allow but the released ones do not use (Qwen2-VL layout
[8, 28, 28]; interleaved [16, 24, 24], whose height and width runs reach past head_dim/2;
head_dim 64 with [8, 12, 12]).

Usage: build/venv/bin/python bench/upstream/mrope_compare.py [--cxx c++]
Exits 1 if any case's exact difference exceeds 1e-12, a hf64 difference its bound, or a
frequency 2 ulp.
"""
import argparse
import json
import pathlib
import subprocess
import sys

import mpmath
import torch
import transformers
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen3_vl import modeling_qwen3_vl

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-12
THETA_TOLERANCE = 4.5e-16  # 2 ulp of a theta in [0.5, 1)
BATCH, HEADS, KV_HEADS = 2, 2, 1
MERGE = 2  # spatial_merge_size of all three (LLM tokens per image: t * h/2 * w/2)


def text_config(head_dim, base, sections, interleaved=False):
    rope = {"rope_type": "default", "rope_theta": base, "mrope_section": list(sections)}
    if interleaved:
        rope["mrope_interleaved"] = True
    return dict(hidden_size=head_dim * HEADS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                head_dim=head_dim, intermediate_size=64, num_hidden_layers=1, rope_parameters=rope)


def qwen2_vl(head_dim=128, base=1e6, sections=(16, 24, 24)):
    cfg = Qwen2VLConfig(text_config=text_config(head_dim, base, sections),
                        vision_config=dict(depth=1, embed_dim=32, hidden_size=head_dim * HEADS, num_heads=2,
                                           mlp_ratio=1))
    return cfg, modeling_qwen2_vl, modeling_qwen2_vl.Qwen2VLModel, modeling_qwen2_vl.Qwen2VLRotaryEmbedding, 0


def qwen2_5_vl(head_dim=128, base=1e6, sections=(16, 24, 24)):
    cfg = Qwen2_5_VLConfig(text_config=text_config(head_dim, base, sections),
                           vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32,
                                              out_hidden_size=head_dim * HEADS, fullatt_block_indexes=[0]))
    return cfg, modeling_qwen2_5_vl, modeling_qwen2_5_vl.Qwen2_5_VLModel, modeling_qwen2_5_vl.Qwen2_5_VLRotaryEmbedding, 0


def qwen3_vl(head_dim=128, base=5e6, sections=(24, 20, 20)):
    cfg = Qwen3VLConfig(text_config=text_config(head_dim, base, sections, interleaved=True),
                        vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32,
                                           out_hidden_size=head_dim * HEADS, deepstack_visual_indexes=[]))
    return cfg, modeling_qwen3_vl, modeling_qwen3_vl.Qwen3VLModel, modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding, 1


# name: model (with its rotary settings), positions ("rope_index" or ("random", high)), offset
CASES = {
    "qwen2_vl_rope_index": (qwen2_vl, {}, "rope_index", 0),
    "qwen2_vl_rope_index_100k": (qwen2_vl, {}, "rope_index", 100000),
    "qwen2_vl_random_axes": (qwen2_vl, {}, ("random", 300000), 0),
    "qwen2_vl_sections_8_28_28": (qwen2_vl, {"sections": (8, 28, 28)}, ("random", 300000), 0),
    "qwen2_5_vl_rope_index": (qwen2_5_vl, {}, "rope_index", 0),
    "qwen2_5_vl_rope_index_100k": (qwen2_5_vl, {}, "rope_index", 100000),
    "qwen2_5_vl_random_axes": (qwen2_5_vl, {}, ("random", 300000), 0),
    "qwen3_vl_rope_index": (qwen3_vl, {}, "rope_index", 0),
    "qwen3_vl_rope_index_100k": (qwen3_vl, {}, "rope_index", 100000),
    "qwen3_vl_rope_index_1m": (qwen3_vl, {}, "rope_index", 1000000),
    "qwen3_vl_random_axes": (qwen3_vl, {}, ("random", 300000), 0),
    "qwen3_vl_interleaved_16_24_24": (qwen3_vl, {"sections": (16, 24, 24)}, ("random", 300000), 0),
    "qwen3_vl_d64_8_12_12": (qwen3_vl, {"head_dim": 64, "sections": (8, 12, 12)}, ("random", 300000), 0),
}


def sequence(cfg, model_class, segments):
    """Token ids and mm_token_type_ids of one sequence: ("text", n), ("image", thw), ("video", thw)."""
    ids, types, images, videos = [], [], [], []
    for kind, what in segments:
        if kind == "text":
            ids += list(range(1, what + 1))
            types += [0] * what
            continue
        t, h, w = what
        frames = [(t, h, w)]
        if kind == "video":
            videos.append(what)
            if model_class is modeling_qwen3_vl.Qwen3VLModel:  # one group per frame, timestamp tokens between
                frames = [(1, h, w)] * t
        else:
            images.append(what)
        for n, (ft, fh, fw) in enumerate(frames):
            if n:
                ids += [11, 12, 13]
                types += [0] * 3
            tokens = ft * (fh // MERGE) * (fw // MERGE)
            ids += [cfg.image_token_id if kind == "image" else cfg.video_token_id] * tokens
            types += [1 if kind == "image" else 2] * tokens
    return ids, types, images, videos


def rope_index_positions(cfg, model_class):
    """(3, BATCH, seq) position ids from the model's own get_rope_index (second sequence left-padded)."""
    model = model_class(cfg).eval()
    a = sequence(cfg, model_class, [("text", 4), ("image", (1, 12, 16)), ("text", 6), ("video", (2, 8, 12)),
                                    ("text", 5)])
    b = sequence(cfg, model_class, [("text", 3), ("image", (1, 20, 8)), ("text", 30)])
    pad = len(a[0]) - len(b[0])
    assert pad > 0
    ids = torch.tensor([a[0], [0] * pad + b[0]])
    types = torch.tensor([a[1], [0] * pad + b[1]], dtype=torch.int32)
    mask = torch.tensor([[1] * len(a[0]), [0] * pad + [1] * len(b[0])])
    images = torch.tensor(a[2] + b[2])
    videos = torch.tensor(a[3] + b[3])
    kwargs = {"second_per_grid_ts": torch.tensor([2.0])} if model_class is modeling_qwen2_5_vl.Qwen2_5_VLModel else {}
    with torch.no_grad():
        pos, _ = model.get_rope_index(ids, types, image_grid_thw=images, video_grid_thw=videos, attention_mask=mask,
                                      **kwargs)
    return pos


def make_cases():
    cases = []
    for seed, (name, (model, settings, positions, offset)) in enumerate(CASES.items()):
        cfg, modeling, model_class, rotary_class, layout = model(**settings)
        tcfg = cfg.text_config
        d = tcfg.head_dim
        g = torch.Generator().manual_seed(2000 + seed)
        if positions == "rope_index":
            pos = rope_index_positions(cfg, model_class)
        else:
            pos = torch.randint(0, positions[1], (3, BATCH, 64), generator=g)
        pos = pos + offset
        seq = pos.shape[-1]
        q = torch.randn(BATCH, HEADS, seq, d, generator=g, dtype=torch.float64)
        k = torch.randn(BATCH, KV_HEADS, seq, d, generator=g, dtype=torch.float64)
        cases.append(dict(name=name, modeling=modeling, rotary=rotary_class(tcfg), d=d,
                          base=tcfg.rope_parameters["rope_theta"], sections=tcfg.rope_parameters["mrope_section"],
                          layout=layout, pos=pos, q=q, k=k))
    return cases


def lrpe_rows(c):
    """q's and k's rows (b, head, s order) and their (t, h, w)."""
    thw = c["pos"].permute(1, 2, 0)  # (batch, seq, 3)
    rows = [c["q"].reshape(-1, c["d"]), c["k"].reshape(-1, c["d"])]
    coords = [thw[:, None].expand(-1, HEADS, -1, -1).reshape(-1, 3), thw[:, None].expand(-1, KV_HEADS, -1, -1).reshape(-1, 3)]
    return torch.cat(rows), torch.cat(coords)


def write_inputs(cases, path):
    lines = [str(len(cases))]
    for c in cases:
        x, coords = lrpe_rows(c)
        lines.append(f"{c['name']} {c['d']} {float(c['base'])!r} {c['layout']} {len(c['sections'])} "
                     f"{' '.join(str(s) for s in c['sections'])} {x.shape[0]}")
        lines.append(" ".join(str(int(e)) for e in coords.flatten().tolist()))
        lines.append(" ".join(repr(float(e)) for e in x.flatten().tolist()))
    path.write_text("\n".join(lines) + "\n")


def lrpe_outputs(cxx, cases):
    exe = ROOT / "build" / "mrope_dump"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "mrope_dump.cpp"), "-o", str(exe)], check=True)
    inputs = ROOT / "build" / "mrope_inputs.txt"
    write_inputs(cases, inputs)
    return json.loads(subprocess.run([str(exe), str(inputs)], check=True, capture_output=True, text=True).stdout)


def hf_inv_freq64(c):
    """HF's compute_default_rope_parameters formula, in float64."""
    d = c["d"]
    return 1.0 / (c["base"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))


def exact_cos_sin(pos, theta):
    """cos and sin (3, batch, seq, d/2) of the exact angles s * theta, each rounded once to double."""
    mpmath.mp.prec = 256
    cache = {}
    thetas = [mpmath.mpf(t) for t in theta]
    cos = torch.empty(*pos.shape, len(theta), dtype=torch.float64)
    sin = torch.empty_like(cos)
    flat_pos = pos.reshape(-1).tolist()
    cos2, sin2 = cos.view(-1, len(theta)), sin.view(-1, len(theta))
    for i, s in enumerate(flat_pos):
        if s not in cache:
            angles = [mpmath.mpf(s) * t for t in thetas]  # exact: 117 bits at most
            cache[s] = ([float(mpmath.cos(a)) for a in angles], [float(mpmath.sin(a)) for a in angles])
        cos2[i], sin2[i] = (torch.tensor(v, dtype=torch.float64) for v in cache[s])
    return cos, sin


def hf_apply(c, freq_cos, freq_sin):
    """The model's own recomposition (axis selection, cat(freqs, freqs)) and apply_rotary_pos_emb."""
    rot = c["rotary"]
    cos = rot.recomposition_frequencies(freq_cos * rot.attention_scaling)  # (Qwen3-VL's writes into its input)
    sin = rot.recomposition_frequencies(freq_sin * rot.attention_scaling)
    q, k = c["modeling"].apply_rotary_pos_emb(c["q"], c["k"], cos, sin)
    return torch.cat([q.reshape(-1, c["d"]), k.reshape(-1, c["d"])])


def hf_outputs(c, theta_lrpe):
    """{exact, hf64, fp32}: q's and k's rows as the model's code encodes them (see the docstring)."""
    exact = hf_apply(c, *exact_cos_sin(c["pos"], theta_lrpe))
    freqs = c["pos"][..., None].double() * hf_inv_freq64(c)  # the forward's formula, in float64
    hf64 = hf_apply(c, freqs.cos(), freqs.sin())
    with torch.no_grad():
        cos32, sin32 = c["rotary"](c["q"].float(), c["pos"])  # the module as shipped (float32)
    q, k = c["modeling"].apply_rotary_pos_emb(c["q"], c["k"], cos32.double(), sin32.double())
    fp32 = torch.cat([q.reshape(-1, c["d"]), k.reshape(-1, c["d"])])
    return {"exact": exact, "hf64": hf64, "fp32": fp32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="c++")
    args = ap.parse_args()
    cases = make_cases()
    ours = lrpe_outputs(args.cxx, cases)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, mpmath {mpmath.__version__}; "
          f"max |lrpe - hf| / (1 + max |hf|), float64, batch {BATCH}, heads {HEADS}/{KV_HEADS}")
    worst = worst_theta = 0.0
    failed = []
    for c in cases:
        mine = ours[c["name"]]
        theta = torch.tensor(mine["theta"], dtype=torch.float64)
        inv64 = hf_inv_freq64(c)
        dtheta = ((theta - inv64).abs() / inv64).max().item()
        dtheta32 = ((c["rotary"].inv_freq.double() - inv64).abs() / inv64).max().item()
        got = torch.tensor(mine["out"], dtype=torch.float64).reshape(-1, c["d"])
        hf = hf_outputs(c, mine["theta"])
        err = {key: ((got - ref).abs().max() / (1 + ref.abs().max())).item() for key, ref in hf.items()}
        max_pos = int(c["pos"].abs().max())
        bound = TOLERANCE + max_pos * 2.0**-51
        worst, worst_theta = max(worst, err["exact"]), max(worst_theta, dtheta)
        if err["exact"] > TOLERANCE or err["hf64"] > bound or dtheta > THETA_TOLERANCE:
            failed.append(c["name"])
        layout = "interleaved" if c["layout"] else "sections"
        print(f"{c['name']:30s} exact {err['exact']:.1e}  hf64 {err['hf64']:.1e} (bound {bound:.1e})  "
              f"fp32 {err['fp32']:.1e}  theta {dtheta:.1e} (fp32 module {dtheta32:.1e})  "
              f"(d {c['d']}, base {c['base']:g}, {layout} {list(c['sections'])}, seq {c['pos'].shape[-1]}, "
              f"max position {max_pos})")
    print(f"worst exact {worst:.1e} (tolerance {TOLERANCE:.0e}), theta {worst_theta:.1e} "
          f"(tolerance {THETA_TOLERANCE:.1e}); {'FAILED: ' + ', '.join(failed) if failed else 'all agree'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
