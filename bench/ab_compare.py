#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Before/after table of Google Benchmark runs taken alternately (A, B, A, B, ...).

Usage: bench/ab_compare.py A1.json B1.json [A2.json B2.json ...]
Each file is one `--benchmark_out_format=json` run with `--benchmark_repetitions=N`. For every
benchmark the best median over A's runs and over B's runs are compared (the best median is the
least disturbed by other load on the machine); prints a Markdown table with the ratio B / A
(below 1: B is faster) and the spread of the medians within each side.
"""
import json
import sys
from collections import defaultdict


def medians(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[b["run_name"]] = (b["real_time"], b["time_unit"])
    return data["context"], out


def main(paths):
    if len(paths) < 2 or len(paths) % 2:
        sys.exit(__doc__)
    sides = [defaultdict(list), defaultdict(list)]
    units = {}
    context = None
    for i, p in enumerate(paths):
        context, med = medians(p)
        for name, (t, unit) in med.items():
            sides[i % 2][name].append(t)
            units[name] = unit
    print(f"host: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs, "
          f"{context.get('mhz_per_cpu', '?')} MHz, date {context.get('date', '?')}; "
          f"{len(paths) // 2} alternating runs per side\n")
    print("| benchmark | before (best median) | after (best median) | after / before | spread before | spread after |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name in sides[0]:
        a, b = sides[0][name], sides[1].get(name)
        if not b:
            continue
        ratio = min(b) / min(a)
        worst = max(worst, ratio)
        spread = lambda v: f"{(max(v) / min(v) - 1) * 100:.1f} %"
        print(f"| {name} | {min(a):.4g} {units[name]} | {min(b):.4g} {units[name]} | {ratio:.3f} | "
              f"{spread(a)} | {spread(b)} |")
    print(f"\nworst after / before: {worst:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
