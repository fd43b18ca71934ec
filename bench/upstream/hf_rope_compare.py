#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's interop::rope_from_hf against transformers' own ROPE_INIT_FUNCTIONS.

Builds and runs bench/upstream/hf_rope_dump.cpp, rebuilds each of its configs as a transformers
config (rope_parameters as HF 5.24 reads them), calls HF's init function for the rope type (with
the same sequence length) and prints, per config, max |theta_lrpe - theta_hf| / theta_hf over
the nonzero frequencies and the attention factors. HF computes its frequencies in float32, so
the expected agreement is float32's rounding. Bench-only (a venv with torch and transformers).

Usage: build/venv/bin/python bench/upstream/hf_rope_compare.py [--cxx c++]
Exits 1 if a frequency differs by more than 1e-6 relative or an attention factor by more than 1e-12.
"""
import argparse
import json
import pathlib
import subprocess
import sys

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def lrpe_ropes(cxx):
    exe = ROOT / "build" / "hf_rope_dump"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "hf_rope_dump.cpp"), "-o", str(exe)], check=True)
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)


def hf_config(head_dim, theta, max_pos, params, partial=1.0):
    rope = {"rope_theta": theta, "partial_rotary_factor": partial, **params}
    return LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                       max_position_embeddings=max_pos, rope_parameters=rope)


def configs():
    k = range(48)
    return {
        "llama3": hf_config(128, 500000.0, 131072, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        "yarn_qwen": hf_config(128, 1e6, 32768, {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 32768}),
        "yarn_deepseek": hf_config(64, 10000.0, 163840, {"rope_type": "yarn", "factor": 40.0, "beta_fast": 32,
                                                         "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0,
                                                         "original_max_position_embeddings": 4096}),
        "longrope_short": hf_config(96, 10000.0, 131072, {"rope_type": "longrope",
                                                          "short_factor": [1.0 + 0.05 * i for i in k],
                                                          "long_factor": [1.0 + 1.3 * i for i in k],
                                                          "original_max_position_embeddings": 4096}),
        "linear": hf_config(256, 1e6, 131072, {"rope_type": "linear", "factor": 8.0}),
        "dynamic": hf_config(128, 10000.0, 4096, {"rope_type": "dynamic", "factor": 2.0}),
        "proportional": hf_config(256, 1e6, 131072, {"rope_type": "proportional"}, partial=0.25),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="c++")
    args = ap.parse_args()
    ours = lrpe_ropes(args.cxx)
    cfgs = configs()
    cfgs["longrope_long"] = cfgs["longrope_short"]
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    worst_theta = worst_factor = 0.0
    for name, mine in ours.items():
        cfg = cfgs[name]
        rope_type = cfg.rope_parameters["rope_type"]
        inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=mine["length"] or None)
        hf = inv_freq.double()
        got = torch.tensor(mine["theta"], dtype=torch.float64)
        nz = hf != 0
        rel = ((got[nz] - hf[nz]).abs() / hf[nz]).max().item()
        zeros_agree = bool((got[~nz] == 0).all())
        dfac = abs(mine["attention_factor"] - float(factor))
        worst_theta, worst_factor = max(worst_theta, rel), max(worst_factor, dfac)
        print(f"{name:15s} theta {rel:.1e} (of {len(got)}; zeros agree: {zeros_agree}), attention factor "
              f"{mine['attention_factor']:.6f} vs {float(factor):.6f}")
    print(f"worst theta {worst_theta:.1e}, attention factor {worst_factor:.1e}")
    sys.exit(0 if worst_theta <= 1e-6 and worst_factor <= 1e-12 else 1)


if __name__ == "__main__":
    main()
