#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's interop::mrope_position_ids against transformers' own Qwen2-VL / Qwen2.5-VL get_rope_index.

Writes the cases (text, image and video runs) to build/mrope_ids_inputs.txt, builds and runs
bench/upstream/mrope_ids_dump.cpp on them, then rebuilds each case as HF's inputs (input_ids,
mm_token_type_ids 0 text / 1 image / 2 video, image_grid_thw, video_grid_thw, for Qwen2.5-VL
second_per_grid_ts as the processor's float32 tensor, attention_mask for a left-padded batch) and
calls get_rope_index of a tiny Qwen2VLModel / Qwen2_5_VLModel (one decoder layer, one vision
block: get_rope_index reads only config.vision_config.spatial_merge_size and tokens_per_second).
Every (t, h, w) coordinate of every token must be equal, and so must mrope_position_deltas
(HF: max coordinate + 1 - tokens, per sequence; here from lrpe's coordinates).

A Qwen2.5-VL video's time interval reaches lrpe as HF forms it: tokens_per_second times the
float32 second_per_grid_t, a float32 value (widened to double); lrpe multiplies the time index by
it in float32 and truncates, as HF does. Where t * interval is an integer in exact arithmetic
(fps 3: 25 * 2/3 * 3 = 50) a product in double can truncate to the neighbour below: the fps 3 and
fps 0.3 cases check that lrpe does not.

Usage: /tmp/venv/bin/python bench/upstream/mrope_ids_compare.py [--cxx c++]
Exits 1 if any coordinate or delta differs.
"""
import argparse
import json
import pathlib
import subprocess
import sys

import torch
import transformers
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

ROOT = pathlib.Path(__file__).resolve().parents[2]
KIND = {"text": 0, "image": 1, "video": 2}


def T(n):
    return ("text", n)


def I(t, h, w):
    return ("image", t, h, w)


def V(t, h, w, second_per_grid_t=None):
    """A video; second_per_grid_t (Qwen2.5-VL) None: not passed to HF (its default 1)."""
    return ("video", t, h, w, second_per_grid_t)


# name: (model, spatial_merge_size, tokens_per_second, interval mapping, [sequences of segments])
CASES = {
    "q2_text_only": ("qwen2_vl", 2, None, None, [[T(12)]]),
    "q2_text_image_text": ("qwen2_vl", 2, None, None, [[T(5), I(1, 28, 42), T(3)]]),
    "q2_images_nonsquare": ("qwen2_vl", 2, None, None,
                            [[T(4), I(1, 8, 20), T(2), I(1, 30, 6), T(1), I(1, 14, 14), T(6)]]),
    "q2_image_first_last": ("qwen2_vl", 2, None, None, [[I(1, 6, 10), T(4), I(1, 4, 2)]]),
    "q2_video_t4": ("qwen2_vl", 2, None, None, [[T(3), V(4, 16, 16), T(5)]]),
    # T = 6 > max(H, W)/m = 4: time runs past height and width, text resumes at p + 4
    "q2_video_time_outruns": ("qwen2_vl", 2, None, None, [[T(2), V(6, 4, 8), T(10)]]),
    "q2_mixed": ("qwen2_vl", 2, None, None,
                 [[T(3), I(1, 12, 8), T(2), V(3, 8, 12), T(2), I(1, 4, 4), T(4)]]),
    "q2_merge1": ("qwen2_vl", 1, None, None, [[T(2), I(1, 3, 5), T(1), V(3, 2, 2), T(2)]]),
    "q2_merge3": ("qwen2_vl", 3, None, None, [[T(2), I(1, 9, 6), T(1), V(2, 6, 12), T(2)]]),
    "q2_batch_padded": ("qwen2_vl", 2, None, None,
                        [[T(3), I(1, 8, 12), T(4)], [T(1), V(2, 4, 4), T(2), I(1, 4, 8), T(1)]]),
    "q25_image": ("qwen2_5_vl", 2, 25, "f32", [[T(5), I(1, 28, 42), T(3)]]),
    # interval 25 * 2.0 = 50: time 0, 50, 100 against max(H, W)/m = 4
    "q25_video_interval50": ("qwen2_5_vl", 2, 25, "f32", [[T(4), V(3, 8, 8, 2.0), T(5)]]),
    # interval 25 * 0.5 = 12.5: time 0, 12, 25, 37, 50
    "q25_video_interval12.5": ("qwen2_5_vl", 2, 25, "f32", [[T(4), V(5, 6, 10, 0.5), T(3)]]),
    # second_per_grid_ts not passed: HF takes 1, interval tokens_per_second
    "q25_video_default_spgt": ("qwen2_5_vl", 2, 25, "f32", [[T(2), V(3, 4, 4), T(2)]]),
    "q25_mixed": ("qwen2_5_vl", 2, 25, "f32",
                  [[T(3), I(1, 12, 8), T(2), V(3, 8, 12, 2.0), T(2), V(4, 4, 6, 0.5), T(1), I(1, 4, 4), T(4)]]),
    # an image directly followed by a video (different mm_token_type_ids: two groups in HF)
    "q25_image_video_adjacent": ("qwen2_5_vl", 2, 25, "f32", [[T(2), I(1, 4, 6), V(3, 4, 4, 0.5), T(2)]]),
    "q25_tps4_video": ("qwen2_5_vl", 2, 4, "f32", [[T(3), V(6, 8, 4, 0.5), T(3), V(3, 4, 4, 1.25), T(2)]]),
    "q25_batch_padded": ("qwen2_5_vl", 2, 25, "f32",
                         [[T(2), V(3, 4, 4, 1.0), T(3)], [T(1), I(1, 4, 4), T(1), V(2, 8, 4, 0.5), T(2)]]),
    # fps 3 (second_per_grid_t = temporal_patch_size / fps = 2/3): 25 * 2/3 * t is an integer in
    # exact arithmetic at t = 3, 6, ...; float32 and double round it to opposite sides (lrpe: float32)
    "q25_fps3": ("qwen2_5_vl", 2, 25, "f32", [[T(2), V(7, 4, 4, 2 / 3), T(2)]]),
    "q25_fps0.3": ("qwen2_5_vl", 2, 25, "f32", [[T(2), V(4, 4, 4, 2 / 0.3), T(2)]]),
}


def interval(model, tps, mapping, spgt):
    if model == "qwen2_vl":
        return 1.0
    if spgt is None:
        return float(tps)
    if mapping == "f32":
        return float(tps * torch.tensor([spgt])[0])  # what HF's get_rope_index holds
    return tps * spgt


def write_inputs(path):
    lines = []
    for name, (model, merge, tps, mapping, seqs) in CASES.items():
        for b, seq in enumerate(seqs):
            words = [f"{name}#{b}", str(merge), "0", str(len(seq))]
            for s in seq:
                words.append(str(KIND[s[0]]))
                if s[0] == "text":
                    words.append(str(s[1]))
                else:
                    words += [str(s[1]), str(s[2]), str(s[3])]
                    if s[0] == "video":
                        words.append(repr(interval(model, tps, mapping, s[4])))
            lines.append(" ".join(words))
    path.write_text(f"{len(lines)}\n" + "\n".join(lines) + "\n")


def lrpe_ids(cxx):
    build = ROOT / "build"
    build.mkdir(exist_ok=True)
    inputs, exe = build / "mrope_ids_inputs.txt", build / "mrope_ids_dump"
    write_inputs(inputs)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "mrope_ids_dump.cpp"), "-o", str(exe)], check=True)
    return json.loads(subprocess.run([str(exe), str(inputs)], check=True, capture_output=True, text=True).stdout)


_MODELS = {}


def hf_model(model, merge, tps):
    key = (model, merge, tps)
    if key not in _MODELS:
        text = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                    intermediate_size=16, vocab_size=64, bos_token_id=None, eos_token_id=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [1, 1, 2]})
        if model == "qwen2_vl":
            cfg = Qwen2VLConfig(text_config=text, image_token_id=61, video_token_id=62,
                                vision_config=dict(depth=1, embed_dim=16, hidden_size=16, num_heads=2,
                                                   spatial_merge_size=merge))
            _MODELS[key] = Qwen2VLModel(cfg).eval()
        else:
            cfg = Qwen2_5_VLConfig(text_config=text, image_token_id=61, video_token_id=62,
                                   vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                                                      out_hidden_size=16, spatial_merge_size=merge,
                                                      tokens_per_second=tps, fullatt_block_indexes=[0]))
            _MODELS[key] = Qwen2_5_VLModel(cfg).eval()
    return _MODELS[key]


def hf_ids(model, merge, tps, seqs):
    """HF's position_ids (3, batch, length), deltas (batch,), and each sequence's (pad, length)."""
    m = hf_model(model, merge, tps)
    token = {0: 1, 1: m.config.image_token_id, 2: m.config.video_token_id}
    types, images, videos, spgts = [], [], [], []
    for seq in seqs:
        tt = []
        for s in seq:
            if s[0] == "text":
                tt += [0] * s[1]
            else:
                t, h, w = s[1:4]
                tt += [KIND[s[0]]] * (t * h * w // merge**2)
                (images if s[0] == "image" else videos).append([t, h, w])
                if s[0] == "video":
                    spgts.append(s[4])
        types.append(tt)
    length = max(len(tt) for tt in types)
    pads = [length - len(tt) for tt in types]
    mm = torch.tensor([[0] * p + tt for p, tt in zip(pads, types)], dtype=torch.int32)
    input_ids = mm.long().apply_(lambda k: token[k])
    kw = dict(input_ids=input_ids, mm_token_type_ids=mm,
              image_grid_thw=torch.tensor(images, dtype=torch.long) if images else None,
              video_grid_thw=torch.tensor(videos, dtype=torch.long) if videos else None)
    if any(pads):
        kw["attention_mask"] = torch.tensor([[0] * p + [1] * len(tt) for p, tt in zip(pads, types)])
    if model == "qwen2_5_vl" and spgts and all(s is not None for s in spgts):
        kw["second_per_grid_ts"] = torch.tensor(spgts)  # float32, as the processor's BatchFeature returns it
    with torch.no_grad():
        pos, deltas = m.get_rope_index(**kw)
    return pos, deltas.view(-1), pads


def first_mismatch(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return i, g, w
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="c++")
    args = ap.parse_args()
    ours = lrpe_ids(args.cxx)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    failures = 0
    for name, (model, merge, tps, mapping, seqs) in CASES.items():
        pos, deltas, pads = hf_ids(model, merge, tps, seqs)
        for b, seq in enumerate(seqs):
            mine = ours[f"{name}#{b}"]
            rows = len(mine) // 3
            label = f"{name}#{b}" if len(seqs) > 1 else name
            problems = []
            if rows != pos.shape[2] - pads[b]:
                problems.append(f"rows {rows} vs HF tokens {pos.shape[2] - pads[b]}")
            else:
                hf = pos[:, b, pads[b]:]  # (3, rows)
                for a, axis in enumerate("thw"):
                    bad = first_mismatch(mine[a::3], hf[a].tolist())
                    if bad:
                        i, g, w = bad
                        problems.append(f"{axis} at token {i}: lrpe {g} vs HF {w}")
                my_delta = max(mine) + 1 - rows
                if my_delta != int(deltas[b]):
                    problems.append(f"delta lrpe {my_delta} vs HF {int(deltas[b])}")
            iv = [repr(interval(model, tps, mapping, s[4])) for s in seq if s[0] == "video"]
            extra = f", video intervals {', '.join(iv)}" if iv else ""
            status = "equal" if not problems else "MISMATCH " + "; ".join(problems)
            print(f"{label:24s} {model:10s} m={merge} tokens {rows:4d}, delta {int(deltas[b]):4d}{extra}: {status}")
            failures += bool(problems)
    print(f"{failures} mismatching sequence(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
