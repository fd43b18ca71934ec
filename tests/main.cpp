// SPDX-License-Identifier: MIT
// The one doctest main of lrpe's tests: compiled once (object library lrpe_doctest_main)
// and linked into every tests/test_*.cpp executable. Test files only include doctest.h.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
