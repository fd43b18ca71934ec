#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's softmax attention options against transformers' own eager attention code.

Draws each case's inputs (float64, N(0, 1), seeded; Q and K scaled up where the logits must be
large, so that soft-capping matters), writes them as text, builds and runs
bench/upstream/attention_options_dump.cpp (lrpe's multi-head `softmax_attention`, reference
backend, double, grouped K/V) on them, recomputes every case in float64 with the model's own
`eager_attention_forward` (an instance of the model's attention module as `module`: its
`num_key_value_groups`, `scaling`, `sinks`, `attn_logit_softcapping`) and prints, per case,
max |lrpe - hf| / (1 + max |hf|). Bench-only (a venv with torch and transformers).

The cases and what lrpe is given (window w: lrpe's `window = w`; chunk C: `chunk = C`):
- gpt-oss (`modeling_gpt_oss.eager_attention_forward`): per-head `sinks` -> `head_sinks`,
  causal, and a sliding layer (`sliding_window` 16; 128 in the released config); also with
  RoPE (gpt-oss's `apply_rotary_pos_emb`) and queries and keys at an offset.
- Gemma 2 (`modeling_gemma2.eager_attention_forward`): `attn_logit_softcapping` 50 -> `softcap`,
  `query_pre_attn_scalar` 48 (scaling 48^-1/2, not 1/sqrt(d)) -> `scale`, causal and sliding.
- Mistral (`modeling_mistral.eager_attention_forward`): sliding window 16, d = 16; also with
  Mistral's (Llama's) `apply_rotary_pos_emb` and queries at an offset over a cache's window of
  keys at an offset of their own (`q_positions`, `k_positions`).
- Llama 4 (`modeling_llama4.eager_attention_forward`): `attention_chunk_size` 32 -> `chunk`,
  from position 0 and for queries at an offset that is not a multiple of 32.

Masks are transformers' own: with every position from 0, `masking_utils.create_causal_mask`,
`create_sliding_window_causal_mask` or `create_chunked_causal_mask` (the model's config with
attn_implementation "eager", no cache, no padding); with offsets, `masking_utils.eager_mask`
with the `q_offset`/`kv_offset` arguments and the predicate those use
(`sliding_window_causal_mask_function`, `chunked_causal_mask_function`). HF's sliding window:
`sliding_window_overlay` keeps key kv_idx for query q_idx iff `kv_idx > q_idx - sliding_window`,
i.e. q_idx - kv_idx < sliding_window: the same as lrpe's `window`, mapped one to one.

Two adjustments, both to keep HF's computation in float64 (with them, what remains is float64
rounding; each is needed for 1e-12 and changes precision only, not the formula):
- Mistral's and Gemma 2's eager code takes the softmax with `dtype=torch.float32` (an upcast
  for half precision, a downcast for float64). During the eager calls `torch.nn.functional.
  softmax` keeps float64 input in float64 (`--fp32-softmax` turns this off: ~1e-7 there).
- RoPE's cos/sin are computed in float64 from HF's formula, inv_freq = 1 / base^(2k/d), and
  given to the model's own `apply_rotary_pos_emb` (HF's rotary-embedding modules compute
  them in float32; lrpe's `rope_neox(d, base)` gets the same base).

Usage: build/venv/bin/python bench/upstream/attention_options_compare.py [--cxx c++] [--fp32-softmax]
Exits 1 if any case's difference exceeds 1e-12.
"""
import argparse
import contextlib
import json
import pathlib
import subprocess
import sys

import torch
import transformers
from transformers import Gemma2Config, GptOssConfig, Llama4TextConfig, MistralConfig
from transformers import masking_utils as mu
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.llama4 import modeling_llama4
from transformers.models.mistral import modeling_mistral

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-12
BATCH = 2


def gpt_oss(layer, window=16):
    cfg = GptOssConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                       sliding_window=window, num_hidden_layers=1, layer_types=[layer], attn_implementation="eager")
    return cfg, modeling_gpt_oss.GptOssAttention(cfg, 0), modeling_gpt_oss


def gemma2(layer):
    cfg = Gemma2Config(hidden_size=64, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                       query_pre_attn_scalar=48, attn_logit_softcapping=50.0, sliding_window=16, num_hidden_layers=1,
                       layer_types=[layer], attn_implementation="eager")
    return cfg, modeling_gemma2.Gemma2Attention(cfg, 0), modeling_gemma2


def mistral(layer):
    cfg = MistralConfig(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=16, sliding_window=16,
                        num_hidden_layers=1, attn_implementation="eager")
    return cfg, modeling_mistral.MistralAttention(cfg, 0), modeling_mistral


def llama4(layer):
    cfg = Llama4TextConfig(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                           attention_chunk_size=32, num_hidden_layers=1, no_rope_layers=[1],
                           attn_implementation="eager")
    return cfg, modeling_llama4.Llama4TextAttention(cfg, 0), modeling_llama4


# name: model, layer ("full_attention" / "sliding_attention" / "chunked_attention"), seq_q, q_offset,
# k_offset (keys from k_offset to q_offset + seq_q - 1), scale of Q and K, RoPE base (0: none)
CASES = {
    "gpt_oss_causal_sinks": (gpt_oss, "full_attention", 96, 0, 0, 1.5, 0),
    "gpt_oss_sliding16_sinks": (gpt_oss, "sliding_attention", 96, 0, 0, 1.5, 0),
    "gpt_oss_rope_sliding_offset": (gpt_oss, "sliding_attention", 40, 90, 0, 1.5, 150000.0),
    "gemma2_causal_softcap50": (gemma2, "full_attention", 110, 0, 0, 3.0, 0),
    "gemma2_sliding16_softcap50": (gemma2, "sliding_attention", 110, 0, 0, 3.0, 0),
    "mistral_sliding16": (mistral, "sliding_attention", 130, 0, 0, 2.0, 0),
    "mistral_rope_sliding_cache": (mistral, "sliding_attention", 24, 100, 80, 2.0, 10000.0),
    "llama4_chunked32": (llama4, "chunked_attention", 120, 0, 0, 1.5, 0),
    "llama4_chunked32_offset": (llama4, "chunked_attention", 48, 77, 0, 1.5, 0),
}


@contextlib.contextmanager
def float64_softmax(enabled):
    """While active, softmax(x, dtype=float32) of a float64 x stays in float64."""
    original = torch.nn.functional.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and input.dtype == torch.float64:
            dtype = None
        return original(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    if enabled:
        torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = original


def hf_mask(cfg, layer, seq_q, q_offset, k_offset):
    """The additive float64 mask (batch, 1, seq_q, seq_k) of transformers' own mask builders."""
    seq_k = q_offset + seq_q - k_offset
    if q_offset == 0 and k_offset == 0:
        create = {"full_attention": mu.create_causal_mask,
                  "sliding_attention": mu.create_sliding_window_causal_mask,
                  "chunked_attention": mu.create_chunked_causal_mask}[layer]
        embeds = torch.zeros(BATCH, seq_q, cfg.hidden_size, dtype=torch.float64)
        mask = create(config=cfg, inputs_embeds=embeds, attention_mask=None, cache=None, allow_is_causal_skip=False)
    else:
        if layer == "sliding_attention":
            predicate = mu.sliding_window_causal_mask_function(cfg.sliding_window)
        elif layer == "chunked_attention":  # (no left padding)
            predicate = mu.chunked_causal_mask_function(cfg.attention_chunk_size, torch.zeros(BATCH, dtype=torch.long))
        else:
            predicate = mu.causal_mask_function
        mask = mu.eager_mask(batch_size=BATCH, q_length=seq_q, kv_length=seq_k, q_offset=q_offset, kv_offset=k_offset,
                             mask_function=predicate, dtype=torch.float64)
    assert mask is not None and mask.shape == (BATCH, 1, seq_q, seq_k), (None if mask is None else mask.shape)
    return mask


def rope(modeling, base, q, k, q_offset, k_offset):
    """q and k rotated at their positions by the model's own apply_rotary_pos_emb (cos/sin in float64)."""
    d = q.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))

    def cos_sin(n, offset):
        freqs = torch.outer(torch.arange(offset, offset + n, dtype=torch.float64), inv_freq)
        if modeling is not modeling_gpt_oss:  # gpt-oss's _apply_rotary_emb takes the d/2 angles as they are
            freqs = torch.cat((freqs, freqs), dim=-1)
        return freqs.cos()[None], freqs.sin()[None]

    qr, _ = modeling.apply_rotary_pos_emb(q, q, *cos_sin(q.shape[-2], q_offset))
    _, kr = modeling.apply_rotary_pos_emb(k, k, *cos_sin(k.shape[-2], k_offset))
    return qr, kr


def make_cases():
    cases = []
    for seed, (name, (model, layer, seq_q, q_offset, k_offset, qk_scale, base)) in enumerate(CASES.items()):
        cfg, module, modeling = model(layer)
        module = module.double().eval()
        heads, kv_heads, d = cfg.num_attention_heads, cfg.num_key_value_heads, module.head_dim
        seq_k = q_offset + seq_q - k_offset
        g = torch.Generator().manual_seed(1000 + seed)
        q = qk_scale * torch.randn(BATCH, heads, seq_q, d, generator=g, dtype=torch.float64)
        k = qk_scale * torch.randn(BATCH, kv_heads, seq_k, d, generator=g, dtype=torch.float64)
        v = torch.randn(BATCH, kv_heads, seq_k, d, generator=g, dtype=torch.float64)
        sinks = []
        if hasattr(module, "sinks"):
            with torch.no_grad():
                module.sinks.copy_(2.0 * torch.randn(heads, generator=g, dtype=torch.float64))
            sinks = module.sinks.detach().tolist()
        softcap = getattr(module, "attn_logit_softcapping", None) or 0.0
        window = cfg.sliding_window if layer == "sliding_attention" else 0
        chunk = cfg.attention_chunk_size if layer == "chunked_attention" else 0
        cases.append(dict(name=name, cfg=cfg, module=module, modeling=modeling, layer=layer, q=q, k=k, v=v,
                          sinks=sinks, softcap=softcap, window=window, chunk=chunk, q_offset=q_offset,
                          k_offset=k_offset, base=base))
    return cases


def write_inputs(cases, path):
    def numbers(x):
        return " ".join(repr(float(e)) for e in (x.flatten().tolist() if isinstance(x, torch.Tensor) else x))

    lines = [str(len(cases))]
    for c in cases:
        b, h, sq, d = c["q"].shape
        hk, sk, dv = c["k"].shape[1], c["k"].shape[2], c["v"].shape[3]
        lines.append(f"{c['name']} {b} {h} {hk} {sq} {sk} {d} {dv} 1 {c['window']} {c['chunk']} {c['softcap']!r} "
                     f"{c['module'].scaling!r} {c['q_offset']} {c['k_offset']} {float(c['base'])!r} {len(c['sinks'])}")
        lines += [numbers(c["sinks"]), numbers(c["q"]), numbers(c["k"]), numbers(c["v"])]
    path.write_text("\n".join(lines) + "\n")


def lrpe_outputs(cxx, cases):
    exe = ROOT / "build" / "attention_options_dump"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3",
                    str(ROOT / "bench" / "upstream" / "attention_options_dump.cpp"), "-o", str(exe)], check=True)
    inputs = ROOT / "build" / "attention_options_inputs.txt"
    write_inputs(cases, inputs)
    return json.loads(subprocess.run([str(exe), str(inputs)], check=True, capture_output=True, text=True).stdout)


def hf_output(c, fp32_softmax):
    """(batch, heads, seq_q, dv) from the model's eager_attention_forward."""
    q, k = c["q"], c["k"]
    if c["base"]:
        q, k = rope(c["modeling"], c["base"], q, k, c["q_offset"], c["k_offset"])
    mask = hf_mask(c["cfg"], c["layer"], q.shape[-2], c["q_offset"], c["k_offset"])
    module = c["module"]
    kwargs = {"softcap": module.attn_logit_softcapping} if hasattr(module, "attn_logit_softcapping") else {}
    with torch.no_grad(), float64_softmax(not fp32_softmax):
        out, _ = c["modeling"].eager_attention_forward(module, q, k, c["v"], mask, scaling=module.scaling,
                                                       dropout=0.0, **kwargs)
    return out.transpose(1, 2)  # eager returns (batch, seq, heads, dv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="c++")
    ap.add_argument("--fp32-softmax", action="store_true",
                    help="leave Mistral's and Gemma 2's float32 softmax as it is (expect ~1e-7 there)")
    args = ap.parse_args()
    torch.manual_seed(0)  # (the modules' unused projection weights)
    cases = make_cases()
    ours = lrpe_outputs(args.cxx, cases)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; "
          f"max |lrpe - hf| / (1 + max |hf|), float64, batch {BATCH}")
    worst = 0.0
    for c in cases:
        hf = hf_output(c, args.fp32_softmax)
        got = torch.tensor(ours[c["name"]], dtype=torch.float64).reshape(hf.shape)
        err = ((got - hf).abs().max() / (1 + hf.abs().max())).item()
        worst = max(worst, err)
        b, h, sq, d = c["q"].shape
        what = (f"H {h}/{c['k'].shape[1]}, seq {sq}x{c['k'].shape[2]}, d {d}, window {c['window']}, "
                f"chunk {c['chunk']}, softcap {c['softcap']:g}, sinks {len(c['sinks'])}, "
                f"positions {c['q_offset']}/{c['k_offset']}, rope {c['base']:g}")
        print(f"{c['name']:28s} {err:.1e}  ({what})")
    print(f"worst {worst:.1e} (tolerance {TOLERANCE:.0e})")
    sys.exit(0 if worst <= TOLERANCE else 1)


if __name__ == "__main__":
    main()
