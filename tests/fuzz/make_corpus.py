#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpus of lrpe's fuzz targets: tests/fuzz/corpus/<target>/<seed>.

Deterministic (no randomness): run it after changing a target's input layout and commit the
result. Each seed is a small, valid call of its target spelled in the layout the target's
reader expects (tests/fuzz/fuzz_common.hpp: little-endian, a mode byte before each "edgy"
value), so that the fuzzer starts from inputs that reach deep into the library; the fuzzer's
mutations then make them invalid in every way.

    python3 tests/fuzz/make_corpus.py            # rewrites tests/fuzz/corpus/
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


class Seed:
    """Bytes in the order the targets read them (fuzz_common.hpp, class input)."""

    def __init__(self):
        self.b = bytearray()

    def u8(self, x):
        self.b += struct.pack("<B", x & 0xFF)
        return self

    def i8(self, x):
        self.b += struct.pack("<b", x)
        return self

    def u16(self, x):
        self.b += struct.pack("<H", x)
        return self

    def flag(self, x):
        return self.u8(1 if x else 0)

    def i64(self, x):
        self.b += struct.pack("<q", x)
        return self

    def u64(self, x):
        self.b += struct.pack("<Q", x)
        return self

    def f64(self, x):
        self.b += struct.pack("<d", x)
        return self

    # edgy_i64 / edgy_f64 in raw mode (mode byte 0, then the 8 bytes)
    def edgy_i64(self, x):
        return self.u8(0).i64(x)

    def edgy_f64(self, x):
        return self.u8(0).f64(x)

    def small(self, x, lo):
        """input::small(lo, hi): one byte, x - lo (< 256)."""
        return self.u8(x - lo)

    def value(self, x):
        """input::value<T>(): k/32 for a signed byte k."""
        return self.i8(max(-128, min(127, round(x * 32))))

    def values(self, xs):
        for x in xs:
            self.value(x)
        return self


def as_bytes(x):
    """An options byte, or a tuple of it and the bytes it makes the target read."""
    return x if isinstance(x, tuple) else (x,)


def wave(n, a=0.37, b=0.0):
    """n moderate, deterministic values in [-1, 1]."""
    out = []
    x = b
    for i in range(n):
        x = (x * 1.7 + a + 0.13 * i) % 2.0
        out.append(round((x - 1.0) * 32) / 32)
    return out


# ------------------------------------------------------------------------ fuzz_buckets
def buckets():
    seeds = {}
    # t5: (selector 0) num_buckets, max_distance, bidirectional, rel, then s, t
    for name, nb, md, bi, rel in [("t5_encoder", 32, 128, True, -17), ("t5_decoder", 32, 128, False, -300),
                                  ("t5_exact", 64, 128, True, 3)]:
        seeds[name] = Seed().u8(0).edgy_i64(nb).edgy_i64(md).flag(bi).edgy_i64(rel).edgy_i64(5).edgy_i64(1000)
    # invalid and extreme configurations (rejected, or a bucket in range: never UB)
    seeds["t5_one_bucket"] = Seed().u8(0).edgy_i64(1).edgy_i64(128).flag(False).edgy_i64(-5)
    seeds["t5_huge_config"] = Seed().u8(0).edgy_i64(2**62).edgy_i64(2**60 + 1).flag(True).edgy_i64(-(2**60))
    # deberta: (1) bucket_size, max_position, rel, then delta, q, k, s, t
    seeds["deberta_v3"] = (Seed().u8(1).edgy_i64(256).edgy_i64(512).edgy_i64(-700).edgy_i64(300).value(0.5)
                           .value(-0.25).edgy_i64(0).edgy_i64(400))
    seeds["deberta_small"] = (Seed().u8(1).edgy_i64(8).edgy_i64(64).edgy_i64(40).edgy_i64(-3).value(1).value(1)
                              .edgy_i64(9).edgy_i64(2))
    seeds["deberta_extremes"] = Seed().u8(1).edgy_i64(256).edgy_i64(-(2**63)).edgy_i64(2**63 - 1)
    # clip and offsets: (2) x, r, s, t
    seeds["clip"] = Seed().u8(2).edgy_i64(-9).edgy_i64(4).edgy_i64(2**62).edgy_i64(-(2**62))
    seeds["clip_negative_r"] = Seed().u8(2).edgy_i64(0).edgy_i64(-(2**63)).edgy_i64(0).edgy_i64(1)
    # alibi: (3) heads, then slopes count-1, slopes, form, head, s, t, q, k
    seeds["alibi"] = (Seed().u8(3).edgy_i64(12).u8(1).edgy_f64(0.5).edgy_f64(0.125).flag(True).u8(1)
                      .edgy_i64(100).edgy_i64(3).value(0.5).value(0.5))
    # clipped tables: (4) r, d, cols, table, s, t, q, k, toeplitz?, [key table, value?]
    s = Seed().u8(4).edgy_i64(3).small(2, 1).small(7, 1).values(wave(7)).edgy_i64(10).edgy_i64(4)
    seeds["toeplitz"] = s.values(wave(2)).values(wave(2, 0.11)).flag(True)
    s = Seed().u8(4).edgy_i64(2).small(2, 1).small(5, 1).values(wave(5)).edgy_i64(-1).edgy_i64(6)
    seeds["shaw"] = s.values(wave(2)).values(wave(2, 0.11)).flag(False).values(wave(10, 0.3)).flag(True)
    # cosformer: (5) M, delta, q, k, s, t
    seeds["cosformer"] = Seed().u8(5).edgy_f64(512.0).edgy_i64(77).value(1).value(-1).edgy_i64(1).edgy_i64(2)
    # graphs: (6) raw-count flag, nodes, edge count, per edge (raw flag, u, v), max_distance flag, value, max_hops
    def graph(nodes, edges, max_distance, max_hops):
        s = Seed().u8(6).flag(False).small(nodes, 0).small(len(edges), 0)
        for u, v in edges:
            s = s.u8(1).small(u, -1).small(v, -1)
        return s.flag(False).small(max_distance, 0).small(max_hops, -1)
    seeds["graph_cycle"] = graph(6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)], 3, 2)
    seeds["graph_two_parts"] = graph(7, [(0, 1), (1, 2), (2, 0), (3, 4), (5, 5), (4, 3)], 2, 4)
    seeds["graph_bad_endpoint"] = graph(4, [(0, 1), (1, 4)], 2, 1)
    seeds["graph_huge_count"] = Seed().u8(6).flag(True).edgy_i64(2**40).small(0, 0).flag(False).small(1, 0).small(1, -1)
    return seeds


# ------------------------------------------------------------------------ fuzz_state_import
def flat_raw(s, xs):
    """from_flat's entries, each in raw mode (mode byte 0, then the double)."""
    s.u16(len(xs))
    for x in xs:
        s.u8(0).f64(x)
    return s


def state_flat(f, dv, decay, last, count, version=2, carry=1.0):
    head = [float(version), float(f), float(dv), decay, float((last >> 32) & 0xFFFFFFFF),
            float(last & 0xFFFFFFFF), float(count)]
    if version == 2:
        head.append(carry)
    body = wave(f * dv, 0.29) + wave(f, 0.61) if count > 0 else [0.0] * (f * dv + f)
    return head + body


def segment(s, n, d, dv, offset_step=1, arrays=False, chunk=4, denominator=False):
    """run_segment's bytes: n, where, the first position's step, arrays, chunk, norm, eps, q/k/v."""
    s.small(n, 1).flag(False).small(offset_step, 0).flag(arrays)
    if arrays:
        for i in range(n - 1):
            s.small(i % 2, 0)
    s.small(chunk, 1).flag(denominator).flag(True)
    for i in range(n):
        s.values(wave(d, 0.1 * i + 0.05)).values(wave(d, 0.2 * i + 0.07)).values(wave(dv, 0.3 * i + 0.01))
    return s


def state_import():
    seeds = {}
    # flags: bit 0 float, bit 1 assign, bits 2-3 encoding (0 none+identity, 1 none+elu, 2 rope+relu, 3 cosformer)
    seeds["double_identity_decode"] = segment(flat_raw(Seed().u8(0b0000), state_flat(2, 2, 1.0, 5, 3)), 1, 2, 2)
    seeds["float_decay_decode"] = segment(flat_raw(Seed().u8(0b0101), state_flat(4, 3, 0.9, 40, 7)), 1, 4, 3)
    seeds["v1_rope"] = segment(flat_raw(Seed().u8(0b1000), state_flat(4, 3, 0.99, 2**40 + 5, 2, version=1)), 3, 4, 3,
                               arrays=True)
    seeds["double_vector_chunks"] = segment(flat_raw(Seed().u8(0b0100), state_flat(8, 8, 1.0, 100, 9)), 17, 8, 8)
    seeds["float_vector_chunks"] = segment(flat_raw(Seed().u8(0b0101), state_flat(16, 16, 0.95, 7, 4)), 17, 16, 16,
                                           chunk=8)
    seeds["cosformer_denominator"] = segment(flat_raw(Seed().u8(0b1100), state_flat(6, 2, 1.0, 0, 1)), 5, 3, 2,
                                             denominator=True)
    seeds["empty_state"] = segment(flat_raw(Seed().u8(0b0001), state_flat(2, 3, 1.0, 0, 0)), 2, 2, 3)
    corrupt = state_flat(2, 2, 1.0, 0, 0)
    corrupt[8] = 0.5  # S[0][0] of a state that holds no key
    seeds["count0_nonzero_s"] = segment(flat_raw(Seed().u8(0b0000), corrupt), 1, 2, 2)
    s = flat_raw(Seed().u8(0b0010), state_flat(3, 2, 0.5, 9, 2))
    seeds["assign_null"] = s.small(0, -2).u8(0xA5).u8(0).flag(True).small(1, 0).flag(True).small(1, -1).flag(True)
    s = flat_raw(Seed().u8(0b0010), state_flat(3, 2, 0.5, 9, 2))
    seeds["assign"] = s.small(0, -2).u8(0).u8(0).flag(True).small(1, 0).flag(True).small(1, -1).flag(True)
    seeds["negative_position"] = segment(flat_raw(Seed().u8(0b0000), state_flat(2, 2, 1.0, -(2**63) + 3, 5)), 2, 2, 2)
    return seeds


# ------------------------------------------------------------------------ fuzz_permutation
def index_array(s, d, swaps, edits=()):
    """index_array(): d, one shuffle byte per i = d-1..1, the edits (place, raw value)."""
    s.small(d, 0)
    for i in range(d - 1, 0, -1):
        s.u8(swaps[i % len(swaps)])
    s.small(len(edits), 0)
    for place, value in edits:
        s.u8(place).edgy_i64(value)
    return s


def permutation():
    seeds = {}
    sw = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
    seeds["p_valid"] = index_array(Seed().u8(0), 8, sw).values(wave(8))
    seeds["p_duplicate"] = index_array(Seed().u8(0), 8, sw, [(2, 5)]).values(wave(8))
    seeds["p_out_of_range"] = index_array(Seed().u8(0), 6, sw, [(1, -1), (4, 2**63 - 1)]).values(wave(6))
    s = index_array(Seed().u8(1), 12, sw).edgy_i64(5).edgy_i64(-3)
    seeds["power_small"] = s.values(wave(12)).edgy_i64(12)
    s = index_array(Seed().u8(1), 16, sw[::-1]).edgy_i64(2**62).edgy_i64(-(2**62) + 7)
    seeds["power_far"] = s.values(wave(16)).edgy_i64(-1)
    seeds["power_extremes"] = index_array(Seed().u8(1), 5, sw).edgy_i64(-(2**63)).edgy_i64(2**63 - 1).values(wave(5)).edgy_i64(5)
    seeds["seeded"] = Seed().u8(2).i64(42).edgy_i64(16).values(wave(16)).edgy_i64(1000).i64(10)
    seeds["seeded_empty"] = Seed().u8(2).i64(-1).edgy_i64(0).i64(0)
    return seeds


# ------------------------------------------------------------------------ fuzz_freq_encoders
def rope_case(s, pairs, base):
    return s.u8(0).edgy_i64(pairs).edgy_f64(base).flag(True)


def theta_list(s, xs):
    s.small(len(xs), 0)
    for x in xs:
        s.edgy_f64(x)
    return s


def unitary(s, n, pos):
    return s.values(wave(n, 0.21)).edgy_i64(pos)


def freq_encoders():
    seeds = {}
    seeds["angles"] = Seed().u8(0).edgy_f64(1.0).edgy_i64(10**6).edgy_i64(2**62)
    seeds["angles_extreme"] = Seed().u8(4).edgy_f64(1e288).edgy_i64(2**63 - 1).edgy_i64(-(2**62))
    # encoders: as_float, schedule, extra width, pairing, kind (0 rotation, 1 complex phase, 2 householder)
    s = rope_case(Seed().u8(1).flag(False), 4, 10000.0).small(0, 0).flag(False).u8(0)
    seeds["rope_rotation"] = unitary(s, 8, 123456).small(4, -1)
    s = rope_case(Seed().u8(1).flag(True), 16, 500000.0).small(1, 0).flag(True).u8(0)
    seeds["rope_float_far"] = unitary(s, 33, 2**62 + 12345).small(8, -1)
    s = Seed().u8(1).flag(False).u8(6)
    s = theta_list(s, [1.0, 0.1, 0.01, 0.001]).edgy_f64(4.0).edgy_f64(4096.0).edgy_f64(10000.0).edgy_f64(32.0)
    s = s.edgy_f64(1.0).flag(True).small(1, 0).flag(True).u8(2)
    for x in wave(9, 0.4):
        s.edgy_f64(x)
    seeds["yarn_householder"] = unitary(s, 9, -77).small(3, -1)
    s = theta_list(Seed().u8(1).flag(True).u8(7), [1.0, 0.05, 0.002, 0.0001])
    s = s.edgy_f64(8.0).edgy_f64(1.0).edgy_f64(4.0).edgy_f64(8192.0).small(0, 0).flag(False).u8(0)
    seeds["llama3"] = unitary(s, 8, 5000).small(2, -1)
    s = theta_list(Seed().u8(1).flag(False).u8(8), [1.0, 0.1, 0.01]).flag(True)
    for x in [1.0, 1.5, 2.0, 4.0, 8.0, 16.0]:
        s.edgy_f64(x)
    s = s.edgy_f64(10000.0).edgy_f64(4096.0).small(0, 0).flag(False).u8(0)
    seeds["longrope"] = unitary(s, 6, 9000).small(1, -1)
    s = Seed().u8(1).flag(False).u8(2).small(8, -2).edgy_f64(512.0).flag(True).small(0, 0).flag(False).u8(0)
    seeds["theta_b"] = unitary(s, 8, 31).small(2, -1)
    s = Seed().u8(1).flag(True).u8(4).small(6, -1).edgy_f64(10000.0).small(0, 0).flag(False).u8(1).small(1, 0)
    seeds["complex_phase_dft"] = unitary(s, 7, -(2**40)).small(2, -1)
    s = Seed().u8(1).flag(False).u8(9).edgy_f64(10000.0).edgy_f64(2.0).edgy_f64(8192.0).edgy_f64(4096.0)
    seeds["dynamic_ntk"] = s.edgy_i64(128).u8(0)
    return seeds


# ------------------------------------------------------------------------ fuzz_attention_shapes
def shapes_seed(as_float, nq, nk, d, dv, modes=(1, 1, 1, 1), qpos=(0,), kpos=(0,), causal=True, sopt=0, skind=0,
                encoding=(), lopt=0, lkind=0, phi=0, seed=0x9E3779B97F4A7C15):
    """fuzz_attention_shapes: flags, shapes, 4 view modes (+ their bytes), positions, softmax
    options, encoding, data seed, poke, encoding bytes, linear options, linear encoding, phi."""
    s = Seed().flag(as_float).small(nq, 0).small(nk, 0).small(d, 0).small(dv, 0)
    for m in modes:
        if isinstance(m, tuple):
            s.u8(m[0])
            for b in m[1:]:
                s.u8(b)
        else:
            s.u8(m)
    for p in (qpos, kpos):
        for b in p:
            s.u8(b)
    s.flag(causal)
    for b in as_bytes(sopt):
        s.u8(b)
    s.u8(skind).u8(0).u64(seed).u8(0)
    for b in encoding:
        s.u8(b)
    for b in as_bytes(lopt):
        s.u8(b)
    return s.u8(lkind).u8(phi).flag(False)


def attention_shapes():
    seeds = {}
    seeds["float_causal_rope"] = shapes_seed(True, 16, 16, 8, 8, skind=1, lkind=1)
    seeds["double_kv_cache_offsets"] = shapes_seed(False, 4, 20, 8, 4, qpos=(2, 24), kpos=(0,), skind=0, lopt=8)
    unsorted = tuple([7] + [(i * 37) % 79 for i in range(12)])
    seeds["float_alibi_unsorted"] = shapes_seed(True, 12, 12, 4, 4, qpos=unsorted, kpos=unsorted, causal=False,
                                                skind=2, encoding=(0, 8, 1), lkind=2)
    sorted_arr = tuple([3, 4] + [i % 3 for i in range(9)])
    seeds["double_t5_sorted"] = shapes_seed(False, 10, 10, 6, 6, qpos=sorted_arr, kpos=sorted_arr, skind=3,
                                            encoding=(33, 0, 128, 1), lopt=1 | 8, phi=1)
    seeds["float_shaw_padded"] = shapes_seed(True, 9, 9, 4, 4, modes=((0, 1), (0, 2), (0, 0), (0, 1)), skind=4,
                                             encoding=(0, 2, 1, 1), lkind=0, phi=2)
    seeds["float_vector_chunks"] = shapes_seed(True, 64, 64, 16, 16, skind=1, lkind=1, phi=0)
    seeds["double_vector_chunks_decay"] = shapes_seed(False, 40, 40, 8, 8, skind=0, lkind=0, phi=2, lopt=8)
    seeds["double_decode"] = shapes_seed(False, 1, 33, 16, 16, qpos=(2, 40), kpos=(0,), skind=1, lkind=1)
    # tile 7 (the byte after the options byte) and chunk 5
    seeds["float_tile_chunk"] = shapes_seed(True, 30, 30, 5, 3, sopt=(4, 8), skind=0, lopt=(4, 6), lkind=0)
    return seeds


# ------------------------------------------------------------------------ fuzz_attention_heads
def heads_seed(as_float, b, h, nq, nk, d, dv, kv_mode=0, modes=(0, 0, 0, 0), qpos=(0,), kpos=(0,), causal=True,
               sopt=0, table_heads=0, skind=0, lopt=0, decays=(0,), lkind=0, phi=0, states=None):
    s = Seed().flag(as_float).small(b, 0).small(h, 0).small(nq, 0).small(nk, 0).small(d, 0).small(dv, 0).u8(kv_mode)
    for m in modes:
        if isinstance(m, tuple):
            for x in m:
                s.u8(x)
        else:
            s.u8(m)
    for p in (qpos, kpos):
        for x in p:
            s.u8(x)
    s.flag(causal).u64(0x2545F4914F6CDD1D).u8(0)
    for x in as_bytes(sopt):
        s.u8(x)
    s.u8(table_heads).u8(skind)
    for x in as_bytes(lopt):
        s.u8(x)
    for x in decays:
        s.u8(x)
    s.u8(lkind).u8(phi).flag(states is not None).u8(0)
    if states is not None:
        s.u8(0)  # count: batch x heads
        for x in states:
            s.u8(x)
    return s


def attention_heads():
    seeds = {}
    seeds["float_gqa_decode_states"] = heads_seed(True, 1, 4, 1, 12, 8, 8, kv_mode=1, modes=(1, 1, 1, 1),
                                                  qpos=(2, 19), skind=1, lkind=1, states=[1, 1, 1, 1])
    seeds["double_mha_bnsh_alibi"] = heads_seed(False, 2, 2, 8, 8, 4, 4, skind=2, lopt=0, decays=(128,), lkind=0)
    seeds["float_padded_t5"] = heads_seed(True, 1, 3, 6, 6, 4, 4, modes=((2, 1, 2, 0), (2, 0, 0, 1), (2, 1, 1, 1), (2, 2, 0, 3)),
                                          skind=3, lkind=2)
    seeds["float_mqa_states_append"] = heads_seed(True, 2, 2, 3, 3, 4, 4, kv_mode=2, qpos=(2, 30), kpos=(2, 30),
                                                  skind=4, lkind=1, states=[3, 6, 1, 4, 9, 7])
    # grouped decode with out.seq = 0 (§2 item 1): out's mode 205 (bsnh, an extent off: seq - 1)
    seeds["float_gqa_decode_out_seq_off"] = heads_seed(True, 1, 4, 1, 12, 8, 8, kv_mode=1, modes=(1, 1, 1, (205, 2, 1)),
                                                       qpos=(2, 19), skind=1, lkind=1)
    # null data in a view with elements (§2 item 2): q's mode 232 (bnsh, null)
    seeds["float_null_q"] = heads_seed(True, 2, 2, 4, 4, 4, 4, modes=(232, 0, 0, 0), skind=0, lkind=0)
    # extents whose product overflows int64 (§2 item 5): every view raw, batch 2^62 x 4 heads
    big = Seed()
    big.u8(5)
    for x in (2**62, 4, 1, 4, 0, 0, 4):
        big.edgy_i64(x)
    big.flag(False)
    seeds["double_extent_overflow"] = heads_seed(False, 1, 4, 1, 4, 4, 4, modes=(tuple(big.b),) * 4, skind=0, lkind=0)
    seeds["double_raw_strides"] = heads_seed(False, 1, 2, 4, 4, 4, 2, modes=((3, 8, 4, 4), (3, 0, 16, 4), (3, 16, 8, 2), 0),
                                             causal=False, skind=0, lkind=0, phi=2)
    return seeds


TARGETS = {
    "fuzz_buckets": buckets,
    "fuzz_state_import": state_import,
    "fuzz_permutation": permutation,
    "fuzz_freq_encoders": freq_encoders,
    "fuzz_attention_shapes": attention_shapes,
    "fuzz_attention_heads": attention_heads,
}


def main():
    root = os.path.join(HERE, "corpus")
    for target, make in TARGETS.items():
        out = os.path.join(root, target)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        for name, seed in make().items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(bytes(seed.b))
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    print(f"make_corpus: {sum(len(m()) for m in TARGETS.values())} seeds, {total} bytes under {root}")


if __name__ == "__main__":
    main()
