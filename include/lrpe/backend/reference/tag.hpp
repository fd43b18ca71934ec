// SPDX-License-Identifier: MIT
/**
 * @file tag.hpp
 * The reference backend's tag, `backend::reference`. It is declared with the backend interface
 * (attention/backend_interface.hpp) because it is every attention entry point's default.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
