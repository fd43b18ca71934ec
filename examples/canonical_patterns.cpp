// SPDX-License-Identifier: MIT
// Renders the n×n pattern f_rel(q, s; k, t) of every relative encoding in lrpe::canonical
// (rows: query position s, columns: key position t, the same q and k at every position, so
// only the positional part varies) into one PNG, docs/img/canonical_patterns.png.
//
// Usage: example_canonical_patterns [out.png]   (default: canonical_patterns.png in the cwd)
//
// Panels, left to right, top to bottom (each normalised to its own [min, max], dark = low):
//   1 RoPE (GPT-J)         2 LRPE Type 1        3 LRPE Type 8         4 PermuteFormer
//   5 T5 bidirectional     6 T5 causal          7 ALiBi causal        8 ALiBi symmetric
//   9 learned table r = 8 10 Shaw r = 8         11 DeBERTa-v2         12 cosFormer M = 64
//  13 Transformer-XL      14 URPE C (weights)
//
// The PNG writer is self-contained (a fixed-Huffman deflate block, CRC-32, Adler-32): no
// dependency.
// The program checks that each panel equals the canonical form's dense view and exits 1 if not.
#include <lrpe/lrpe.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

using lrpe::index_t;
using lrpe::position_t;
namespace cn = lrpe::canonical;
using rows = lrpe::row_matrix<double>;

// ------------------------------------------------------------------------ a tiny PNG writer
std::uint32_t crc32(const unsigned char* p, std::size_t n, std::uint32_t crc = 0) {
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put32(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
}

void chunk(std::vector<unsigned char>& png, const char* type, const std::vector<unsigned char>& data) {
  put32(png, static_cast<std::uint32_t>(data.size()));
  std::vector<unsigned char> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  png.insert(png.end(), body.begin(), body.end());
  put32(png, crc32(body.data(), body.size()));
}

/// LSB-first bit writer of a deflate stream.
struct bit_writer {
  std::vector<unsigned char>& out;
  std::uint32_t acc = 0;
  int bits = 0;
  void put(std::uint32_t v, int n) {  // n low bits of v, least significant first
    for (int i = 0; i < n; ++i) {
      acc |= ((v >> i) & 1u) << bits;
      if (++bits == 8) { out.push_back(static_cast<unsigned char>(acc)); acc = 0; bits = 0; }
    }
  }
  void put_code(std::uint32_t code, int n) {  // a Huffman code, most significant bit first
    for (int i = n - 1; i >= 0; --i) put((code >> i) & 1u, 1);
  }
  void flush() { if (bits > 0) put(0, 8 - bits); }
};

/// Literal/length symbol in deflate's fixed Huffman code (RFC 1951 §3.2.6).
void fixed_symbol(bit_writer& bw, int sym) {
  if (sym < 144) bw.put_code(0x30u + static_cast<std::uint32_t>(sym), 8);
  else if (sym < 256) bw.put_code(0x190u + static_cast<std::uint32_t>(sym - 144), 9);
  else if (sym < 280) bw.put_code(static_cast<std::uint32_t>(sym - 256), 7);
  else bw.put_code(0xC0u + static_cast<std::uint32_t>(sym - 280), 8);
}

/**
 * zlib stream of `raw` with one fixed-Huffman deflate block. Matches are searched only at two
 * distances (one pixel back and one scanline back): enough for zoomed, piecewise-constant
 * images, and simple enough to check by eye.
 */
std::vector<unsigned char> zlib_fixed(const std::vector<unsigned char>& raw, std::size_t scanline) {
  static constexpr int len_base[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27,
                                       31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
  static constexpr int len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                        2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
  static constexpr int dist_base[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129,
                                        193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
                                        6145, 8193, 12289, 16385, 24577};
  static constexpr int dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                         6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
  std::vector<unsigned char> z = {0x78, 0x01};
  bit_writer bw{z};
  bw.put(1, 1);  // BFINAL
  bw.put(1, 2);  // BTYPE = 01, fixed Huffman
  const std::size_t n = raw.size();
  for (std::size_t i = 0; i < n;) {
    std::size_t best_len = 0, best_dist = 0;
    for (std::size_t dist : {std::size_t{3}, scanline}) {
      if (dist == 0 || dist > i || dist > 32768) continue;
      std::size_t len = 0;
      while (len < 258 && i + len < n && raw[i + len] == raw[i + len - dist]) ++len;
      if (len > best_len) { best_len = len; best_dist = dist; }
    }
    if (best_len < 3) {
      fixed_symbol(bw, raw[i]);
      ++i;
      continue;
    }
    int lc = 28;
    while (len_base[lc] > static_cast<int>(best_len)) --lc;
    fixed_symbol(bw, 257 + lc);
    bw.put(static_cast<std::uint32_t>(static_cast<int>(best_len) - len_base[lc]), len_extra[lc]);
    int dc = 29;
    while (dist_base[dc] > static_cast<int>(best_dist)) --dc;
    bw.put_code(static_cast<std::uint32_t>(dc), 5);
    bw.put(static_cast<std::uint32_t>(static_cast<int>(best_dist) - dist_base[dc]), dist_extra[dc]);
    i += best_len;
  }
  fixed_symbol(bw, 256);  // end of block
  bw.flush();
  std::uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed data
  for (unsigned char c : raw) { a = (a + c) % 65521; b = (b + a) % 65521; }
  put32(z, (b << 16) | a);
  return z;
}

/// RGB image (row-major, 3 bytes per pixel) as PNG bytes.
std::vector<unsigned char> encode_png(const std::vector<unsigned char>& rgb, int w, int h) {
  std::vector<unsigned char> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), rgb.begin() + 3L * w * y, rgb.begin() + 3L * w * (y + 1));
  }
  const std::vector<unsigned char> z = zlib_fixed(raw, 1 + 3 * static_cast<std::size_t>(w));

  std::vector<unsigned char> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<unsigned char> ihdr;
  put32(ihdr, static_cast<std::uint32_t>(w));
  put32(ihdr, static_cast<std::uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

/// A viridis-like sequential colour map on [0, 1].
std::array<unsigned char, 3> colour(double x) {
  static constexpr double stops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  x = std::clamp(x, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(x));
  const double f = x - i;
  std::array<unsigned char, 3> c{};
  for (int k = 0; k < 3; ++k) c[static_cast<std::size_t>(k)] = static_cast<unsigned char>(std::lround(stops[i][k] * (1 - f) + stops[i + 1][k] * f));
  return c;
}

// ------------------------------------------------------------------------------ the panels
constexpr index_t n = 64, d = 8;

struct panel {
  std::string name;
  lrpe::dense_matrix<double> values;  // n × n
};

/// f_rel(q, s; k, t) for s, t in [0, n), with the same q and k at every position, checked
/// against the canonical form's dense view at a few entries.
template <class V>
panel pattern(const std::string& name, const V& v, const std::vector<double>& q, const std::vector<double>& k,
              bool& ok) {
  rows qs(n, d), ks(n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) {
      qs(i, j) = q[static_cast<std::size_t>(j)];
      ks(i, j) = k[static_cast<std::size_t>(j)];
    }
  panel p{name, cn::score_matrix(v, qs, ks)};
  const auto cf = cn::canonical_form_of(v);
  for (index_t s : {0L, 5L, 63L})
    for (index_t t : {0L, 17L, 40L}) {
      const double dense = cf.dense_score(q.data(), s, k.data(), t);
      if (std::abs(dense - p.values(s, t)) > 1e-9 * (1 + std::abs(dense))) {
        std::fprintf(stderr, "%s: score %g != canonical dense %g at (%ld, %ld)\n", name.c_str(), p.values(s, t), dense,
                     static_cast<long>(s), static_cast<long>(t));
        ok = false;
      }
    }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out_path = argc > 1 ? argv[1] : "canonical_patterns.png";
  bool ok = true;
  std::vector<double> q(d), k(d);
  for (index_t j = 0; j < d; ++j) {  // fixed, deterministic rows
    q[static_cast<std::size_t>(j)] = std::cos(0.7 * static_cast<double>(j) + 0.3);
    k[static_cast<std::size_t>(j)] = std::cos(0.7 * static_cast<double>(j) + 0.3);
  }
  const std::vector<double> zero(d, 0.0);

  // tables: a bucket's value is a smooth function of its index, so bucket edges show
  rows t5_table(1, 32);
  for (index_t b = 0; b < 32; ++b) t5_table(0, b) = std::sin(0.35 * static_cast<double>(b));
  rows toeplitz(1, 17), shaw_k(17, d), deb_k(16, d), deb_q(16, d), urpe_c(1, 64);
  for (index_t j = 0; j < 17; ++j) toeplitz(0, j) = -std::abs(static_cast<double>(j - 8)) + 2 * std::sin(static_cast<double>(j));
  for (index_t j = 0; j < 17; ++j)
    for (index_t i = 0; i < d; ++i) shaw_k(j, i) = std::sin(0.4 * static_cast<double>(j) + static_cast<double>(i));
  for (index_t j = 0; j < 16; ++j)
    for (index_t i = 0; i < d; ++i) {
      deb_k(j, i) = std::cos(0.5 * static_cast<double>(j) + 0.2 * static_cast<double>(i));
      deb_q(j, i) = std::sin(0.3 * static_cast<double>(j) - 0.1 * static_cast<double>(i));
    }
  for (index_t b = 0; b < 64; ++b) urpe_c(0, b) = 1 + 0.5 * std::cos(0.3 * static_cast<double>(b));
  rows xl_u(1, d), xl_v(1, d), xl_w(d, 16);
  for (index_t i = 0; i < d; ++i) {
    xl_u(0, i) = 0.1 * static_cast<double>(i);
    xl_v(0, i) = -0.05 * static_cast<double>(i);
    for (index_t j = 0; j < 16; ++j) xl_w(i, j) = std::sin(static_cast<double>(3 * i + j));
  }

  std::vector<panel> panels;
  panels.push_back(pattern("RoPE GPT-J", lrpe::rope_gptj<double>(d), q, k, ok));
  panels.push_back(pattern("LRPE Type 1", lrpe::type1<double>(d), q, k, ok));
  panels.push_back(pattern("LRPE Type 8", lrpe::type8<double>(d), q, k, ok));
  panels.push_back(pattern("PermuteFormer", lrpe::permuteformer<double>(d), q, k, ok));
  panels.push_back(pattern("T5 bidirectional", cn::t5_bias<double>(d, {32, 128, true}, t5_table), zero, zero, ok));
  panels.push_back(pattern("T5 causal", cn::t5_bias<double>(d, {32, 128, false}, t5_table), zero, zero, ok));
  panels.push_back(pattern("ALiBi causal", cn::alibi<double>(d, {0.125}, cn::alibi_form::causal), zero, zero, ok));
  panels.push_back(pattern("ALiBi symmetric", cn::alibi<double>(d, {0.125}, cn::alibi_form::symmetric), zero, zero, ok));
  panels.push_back(pattern("learned table r=8", cn::toeplitz_bias<double>(d, 8, toeplitz), zero, zero, ok));
  panels.push_back(pattern("Shaw r=8", cn::shaw<double>(d, 8, shaw_k), q, zero, ok));
  panels.push_back(pattern("DeBERTa-v2", cn::deberta_v2<double>(d, 1, {8, 32}, deb_k, deb_q), q, k, ok));
  panels.push_back(pattern("cosFormer M=64", cn::cosformer<double>(d, 64.0), q, k, ok));
  panels.push_back(pattern("Transformer-XL", cn::transformer_xl<double>(d, xl_u, xl_v, xl_w), q, k, ok));
  {
    const cn::urpe<double> c({16, 32, true}, urpe_c.leftCols(16));
    panel p{"URPE C", lrpe::dense_matrix<double>(n, n)};
    for (index_t s = 0; s < n; ++s)
      for (index_t t = 0; t < n; ++t) p.values(s, t) = c.weight(s, t);
    panels.push_back(std::move(p));
  }

  constexpr int zoom = 3, gap = 8, cols = 4;
  const int side = static_cast<int>(n) * zoom;
  const int grid_rows = (static_cast<int>(panels.size()) + cols - 1) / cols;
  const int w = cols * side + (cols + 1) * gap, h = grid_rows * side + (grid_rows + 1) * gap;
  std::vector<unsigned char> rgb(static_cast<std::size_t>(3 * w * h), 255);
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const auto& m = panels[p].values;
    const double lo = m.minCoeff(), hi = m.maxCoeff();
    const int x0 = gap + static_cast<int>(p % cols) * (side + gap), y0 = gap + static_cast<int>(p / cols) * (side + gap);
    for (int y = 0; y < side; ++y)
      for (int x = 0; x < side; ++x) {
        const double v = m(y / zoom, x / zoom);
        const auto c = colour(hi > lo ? (v - lo) / (hi - lo) : 0.5);
        const std::size_t at = 3 * (static_cast<std::size_t>(y0 + y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x0 + x));
        rgb[at] = c[0];
        rgb[at + 1] = c[1];
        rgb[at + 2] = c[2];
      }
    std::printf("panel %2zu %-20s min %+.4f max %+.4f\n", p + 1, panels[p].name.c_str(), lo, hi);
  }
  const auto png = encode_png(rgb, w, h);
  std::ofstream f(out_path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::printf("wrote %s (%dx%d, %zu bytes)\n", out_path.c_str(), w, h, png.size());
  return ok ? 0 : 1;
}
