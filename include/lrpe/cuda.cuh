// SPDX-License-Identifier: MIT
/**
 * @file cuda.cuh
 * Opt-in entry header of lrpe's CUDA backend (link the CMake target `lrpe::cuda`; compile the
 * including file with nvcc). Gives the whole CPU library (<lrpe/lrpe.hpp>) plus:
 *
 * - `lrpe::cuda_error` and `LRPE_CUDA_CHECK` (backend/cuda/error.cuh);
 * - `cuda::device_view`, `rows`, `bnsh`, `bsnh`, `device_positions`, `device_buffer`
 *   (backend/cuda/types.cuh);
 * - `cuda::device_encoder` (device copy of any preset) and `cuda::encode` (Q and K in one
 *   fused launch) (backend/cuda/device_encoder.cuh, encoder.cuh);
 * - `cuda::linear_attention` (backend/cuda/linear.cuh);
 * - `cuda::softmax_attention` with `cuda::device_bias` (ALiBi, T5, Toeplitz)
 *   (backend/cuda/softmax.cuh, bias.cuh).
 *
 * Storage fp32, fp16 (`__half`) or bf16 (`__nv_bfloat16`); arithmetic in fp32. docs/cuda.md
 * has the API, the error model and what has (not yet) been verified on a GPU.
 */
#pragma once

#if !defined(__CUDACC__)
#  error "<lrpe/cuda.cuh> must be compiled by nvcc (a .cu file of a target linked with lrpe::cuda); CPU code includes <lrpe/lrpe.hpp>"
#elif !defined(LRPE_HAS_CUDA)
#  error "<lrpe/cuda.cuh> needs the CMake target lrpe::cuda (target_link_libraries(<your target> PRIVATE lrpe::cuda)), which defines LRPE_HAS_CUDA and passes -std=c++20 to nvcc; configure lrpe with -DLRPE_ENABLE_CUDA=ON to require it"
#endif

// Eigen stays host-only: without this, Eigen marks its functions __host__ __device__ under
// nvcc and every .cu file including lrpe gets nvcc warnings 20012/20013/20015 from Eigen's
// headers. Only effective when Eigen was not included before this header.
#if !defined(EIGEN_NO_CUDA) && !defined(EIGEN_WORLD_VERSION)
#  define EIGEN_NO_CUDA
#endif

#include <lrpe/lrpe.hpp>

#include <lrpe/backend/cuda/bias.cuh>
#include <lrpe/backend/cuda/device_encoder.cuh>
#include <lrpe/backend/cuda/encoder.cuh>
#include <lrpe/backend/cuda/error.cuh>
#include <lrpe/backend/cuda/linear.cuh>
#include <lrpe/backend/cuda/softmax.cuh>
#include <lrpe/backend/cuda/types.cuh>
