// SPDX-License-Identifier: MIT
// cuda_peer_io: lrpe's CUDA kernels on inputs written by bench/torch_gpu_peer.py (part
// "compare"), their outputs written back for the script to compare with PyTorch on the same
// device: torch's scaled_dot_product_attention and HF's LLaMA rotary. Not a benchmark (nothing is
// timed) and never run by CI; built with the CUDA benches.
//
//   cuda_peer_io DIR B H N D
//
// Reads DIR/{q,k,v}_{bf16,f32}.bin: B×H×N×D BNSH tensors, raw little-endian (bf16 as its 16
// bits). Writes, in the input's type:
//   DIR/softmax_{bf16,f32}_causal{0,1}.bin  lrpe::cuda::softmax_attention, no encoding, scale 1/√D
//   DIR/rope_{bf16,f32}_{0,999000}.bin      q encoded by rope_neox (HF's pairing) at positions
//                                            start + s
#include <lrpe/cuda.cuh>

#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace cu = lrpe::cuda;
using lrpe::index_t;

template <class T>
std::vector<T> read(const std::string& path, std::size_t count) {
  std::vector<T> x(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(count * sizeof(T)));
  if (!in || in.gcount() != static_cast<std::streamsize>(count * sizeof(T))) {
    std::fprintf(stderr, "cuda_peer_io: cannot read %zu values from %s\n", count, path.c_str());
    std::exit(2);
  }
  return x;
}

template <class T>
void write(const std::string& path, const std::vector<T>& x) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(T)));
  if (!out) {
    std::fprintf(stderr, "cuda_peer_io: cannot write %s\n", path.c_str());
    std::exit(2);
  }
}

template <class T>
void run(const std::string& dir, const char* type, index_t B, index_t H, index_t N, index_t D) {
  const auto count = static_cast<std::size_t>(B * H * N * D);
  const cu::device_buffer<T> q(read<T>(dir + "/q_" + type + ".bin", count));
  const cu::device_buffer<T> k(read<T>(dir + "/k_" + type + ".bin", count));
  const cu::device_buffer<T> v(read<T>(dir + "/v_" + type + ".bin", count));
  const auto view = [&](const cu::device_buffer<T>& b) { return cu::bnsh(static_cast<const T*>(b.data()), B, H, N, D); };
  cu::device_buffer<T> out(count);
  for (const bool causal : {false, true}) {
    cu::softmax_attention<T>(view(q), view(k), view(v), cu::bnsh(out.data(), B, H, N, D), lrpe::no_encoding{}, nullptr,
                             {.causal = causal});
    LRPE_CUDA_CHECK(cudaDeviceSynchronize());
    write(dir + "/softmax_" + type + "_causal" + (causal ? "1" : "0") + ".bin", out.download());
  }
  const cu::device_encoder rope{lrpe::rope_neox<float>(D)};
  for (const lrpe::position_t start : {lrpe::position_t{0}, lrpe::position_t{999'000}}) {
    cu::encode<T>(rope, view(q), cu::offset_positions(start), cu::bnsh(out.data(), B, H, N, D));
    LRPE_CUDA_CHECK(cudaDeviceSynchronize());
    write(dir + "/rope_" + type + "_" + std::to_string(start) + ".bin", out.download());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: cuda_peer_io DIR B H N D\n");
    return 2;
  }
  const std::string dir = argv[1];
  const index_t B = std::atoll(argv[2]), H = std::atoll(argv[3]), N = std::atoll(argv[4]), D = std::atoll(argv[5]);
  try {
    run<__nv_bfloat16>(dir, "bf16", B, H, N, D);
    run<float>(dir, "f32", B, H, N, D);
  } catch (const lrpe::error& e) {
    std::fprintf(stderr, "cuda_peer_io: %s\n", e.what());
    return 1;
  }
  std::printf("cuda_peer_io: wrote softmax and rope outputs under %s\n", dir.c_str());
  return 0;
}
