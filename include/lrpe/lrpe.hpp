// SPDX-License-Identifier: MIT
/**
 * @file lrpe.hpp
 * The front door: `#include <lrpe/lrpe.hpp>` gives the whole CPU library.
 * Opt-in: `<lrpe/simd.hpp>` (xsimd backend) and `<lrpe/cuda.cuh>` (CUDA backend).
 */
#pragma once

#include <lrpe/detail/warnings_push.hpp>

#include <lrpe/core/concepts.hpp>
#include <lrpe/core/config.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/random.hpp>
#include <lrpe/core/relative.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/core/view.hpp>

#include <lrpe/freq/schedules.hpp>
#include <lrpe/freq/scaling.hpp>

#include <lrpe/p/dct.hpp>
#include <lrpe/p/dense.hpp>
#include <lrpe/p/dft.hpp>
#include <lrpe/p/householder.hpp>
#include <lrpe/p/identity.hpp>
#include <lrpe/p/permutation.hpp>

#include <lrpe/lambda/complex_phase.hpp>
#include <lrpe/lambda/identity.hpp>
#include <lrpe/lambda/permutation_power.hpp>
#include <lrpe/lambda/rotation.hpp>

#include <lrpe/encoder.hpp>
#include <lrpe/presets.hpp>

#include <lrpe/check/check.hpp>
#include <lrpe/check/gradient.hpp>

#include <lrpe/interop/hf_rope.hpp>
#include <lrpe/interop/rope_conventions.hpp>
#include <lrpe/attention/attention.hpp>
#include <lrpe/backend/reference.hpp>
#include <lrpe/canonical/canonical.hpp>
#include <lrpe/absolute/laplacian.hpp>
#include <lrpe/absolute/learned.hpp>
#include <lrpe/absolute/sinusoidal.hpp>

#include <lrpe/detail/warnings_pop.hpp>
