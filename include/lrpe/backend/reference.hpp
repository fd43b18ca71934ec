// SPDX-License-Identifier: MIT
/**
 * @file reference.hpp
 * The reference backend (`backend::reference`): plain loops and Eigen products written for
 * clarity, the oracle every other backend is tested against. <lrpe/lrpe.hpp> includes it.
 */
#pragma once

#include <lrpe/backend/reference/encode.hpp>
#include <lrpe/backend/reference/linear.hpp>
#include <lrpe/backend/reference/linear_backward.hpp>
#include <lrpe/backend/reference/softmax.hpp>
#include <lrpe/backend/reference/softmax_backward.hpp>
