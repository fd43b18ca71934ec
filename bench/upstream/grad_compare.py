#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lrpe's softmax-attention gradients against PyTorch autograd through Hugging Face's own code.

Builds and runs bench/upstream/grad_dump.cpp (lrpe's reference backend, double), recomputes the
same problems in float64 with autograd, through `transformers`' Llama `apply_rotary_pos_emb` /
`rotate_half`, T5's `T5Attention._relative_position_bucket` (URPE: the authors' order of
operations, with T5's buckets) and DeBERTa-v2's `DisentangledSelfAttention`, and prints, per
case and gradient, max |lrpe - torch| / max |torch| (absolute where the gradient is 0 in exact
arithmetic). Bench-only: torch and transformers are never dependencies of lrpe or its tests (a venv: `python3 -m venv build/venv && build/venv/bin/pip
install torch transformers`).

Usage: build/venv/bin/python bench/upstream/grad_compare.py [--cxx c++]
Exits 1 if any relative difference exceeds 1e-12.
"""
import argparse
import json
import pathlib
import subprocess
import sys

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
from transformers.models.t5.modeling_t5 import T5Attention

ROOT = pathlib.Path(__file__).resolve().parents[2]


def lrpe_gradients(cxx):
    exe = ROOT / "build" / "grad_dump"
    src = ROOT / "bench" / "upstream" / "grad_dump.cpp"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{ROOT / 'include'}", "-I/usr/include/eigen3", str(src), "-o", str(exe)],
                   check=True)
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def attention(q, k, v, bias, causal, scale):
    s = q @ k.transpose(-1, -2) * scale + bias
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def rope_case(data):
    """Llama's RoPE (rotate_half pairing, base 10000) on Q and K, causal, scale 1/sqrt(d)."""
    n, d = data["n"], data["d"]
    q, k, v = (t(data[x]).requires_grad_() for x in ("q", "k", "v"))
    theta = (10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).requires_grad_()
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), theta)
    emb = torch.cat((freqs, freqs), dim=-1)
    qr, kr = apply_rotary_pos_emb(q[None, None], k[None, None], emb.cos()[None], emb.sin()[None])
    out = attention(qr[0, 0], kr[0, 0], v, 0.0, True, d ** -0.5)
    (out * t(data["d_out"])).sum().backward()
    return out, q.grad, k.grad, v.grad, theta.grad


def t5_case(data, causal):
    """T5's relative-position buckets (bidirectional for the encoder, causal for the decoder), no scaling."""
    n = data["n"]
    num_buckets, max_distance = data["t5_buckets"]
    q, k, v = (t(data[x]).requires_grad_() for x in ("q", "k", "v"))
    table = t(data["t5_table"][0]).requires_grad_()
    rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # memory - query, as T5
    buckets = T5Attention._relative_position_bucket(rel, bidirectional=not causal, num_buckets=num_buckets,
                                                    max_distance=max_distance)
    out = attention(q, k, v, table[buckets], causal, 1.0)
    (out * t(data["d_out"])).sum().backward()
    return out, q.grad, k.grad, v.grad, table.grad


def urpe_case(data):
    """URPE as the authors compose it (lsj2408/URPE, fairseq/modules/multihead_attention.py):
    softmax(q k^T * scaling + rel_pos_bias), times ur_rel_pos_bias, then @ v; both tables
    gathered by T5's bidirectional buckets."""
    n, d = data["n"], data["d"]
    num_buckets, max_distance = data["t5_buckets"]
    q, k, v = (t(data[x]).requires_grad_() for x in ("q", "k", "v"))
    table = t(data["t5_table"][0]).requires_grad_()
    c_table = t(data["urpe_table"][0]).requires_grad_()
    rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    buckets = T5Attention._relative_position_bucket(rel, bidirectional=True, num_buckets=num_buckets,
                                                    max_distance=max_distance)
    weights = torch.softmax(q @ k.T * d ** -0.5 + table[buckets], dim=-1) * c_table[buckets]
    out = weights @ v
    (out * t(data["d_out"])).sum().backward()
    return out, q.grad, k.grad, v.grad, table.grad, c_table.grad


def deberta_case(data, shared):
    """DeBERTa-v2 through Hugging Face's `DisentangledSelfAttention.disentangled_attention_bias`
    (its buckets, its p2c index, its projections of the relative embeddings; with
    share_att_key, query_proj and key_proj), 2 heads, content scores q k^T / scale as its
    forward computes them, the softmax, then V."""
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention, scaled_size_sqrt
    n, d, heads = data["n"], data["d"], 2
    case = data["deberta_shared" if shared else "deberta"]
    cfg = DebertaV2Config(hidden_size=heads * d, num_attention_heads=heads, position_buckets=8,
                          max_relative_positions=24, pos_att_type=["c2p", "p2c"], relative_attention=True,
                          share_att_key=shared)
    att = DisentangledSelfAttention(cfg).double()
    kp = att.key_proj if shared else att.pos_key_proj
    qp = att.query_proj if shared else att.pos_query_proj
    with torch.no_grad():  # nn.Linear stores W as out x in; lrpe's projection is x W (in x out)
        kp.weight.copy_(t(case["wk"]).T)
        kp.bias.copy_(t(case["bk"]))
        qp.weight.copy_(t(case["wq"]).T)
        qp.bias.copy_(t(case["bq"]))
    q, k, v = (t(case[x]).reshape(heads, n, d).requires_grad_() for x in ("q", "k", "v"))
    e = t(case["e"]).requires_grad_()
    scale = scaled_size_sqrt(q, 3)
    scores = torch.bmm(q, k.transpose(-1, -2) / scale.to(dtype=q.dtype))
    scores = scores + att.disentangled_attention_bias(q, k, None, e, 3)
    out = torch.softmax(scores, dim=-1) @ v
    (out * t(case["d_out"]).reshape(heads, n, d)).sum().backward()
    return [("O", "out", out), ("dQ", "dq", q.grad), ("dK", "dk", k.grad), ("dV", "dv", v.grad), ("dE", "de", e.grad),
            ("dW_k", "dwk", kp.weight.grad.T), ("db_k", "dbk", kp.bias.grad), ("dW_q", "dwq", qp.weight.grad.T),
            ("db_q", "dbq", qp.bias.grad)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="c++")
    args = ap.parse_args()
    data = lrpe_gradients(args.cxx)
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; float64; "
          "max |lrpe - torch| / max |torch|")
    worst = 0.0
    labels = list(zip(("O", "dQ", "dK", "dV", "params", "C"), ("out", "dq", "dk", "dv", "dparams", "dc")))
    cases = [(name, [(*lk, r) for lk, r in zip(labels, ref)])
             for name, ref in (("rope", rope_case(data)), ("t5", t5_case(data, False)),
                               ("t5_causal", t5_case(data, True)), ("urpe", urpe_case(data)))]
    cases += [("deberta", deberta_case(data, False)), ("deberta_shared", deberta_case(data, True))]
    for name, ref in cases:
        ours = data[name]
        row = []
        for label, key, want in ref:
            got = t(ours[key]).reshape(want.shape)
            # a gradient that is zero in exact arithmetic (DeBERTa's b_k: q_s.b_k is the same for
            # every key of row s, and the softmax ignores it) is compared absolutely
            scale = want.abs().max().item()
            err = (got - want).abs().max().item() / (scale if scale > 1e-12 else 1.0)
            worst = max(worst, err)
            row.append(f"{label} {err:.1e}" + ("" if scale > 1e-12 else " (abs; exactly 0)"))
        print(f"{name:10s} " + ", ".join(row))
    print(f"worst {worst:.1e}")
    sys.exit(0 if worst <= 1e-12 else 1)


if __name__ == "__main__":
    main()
