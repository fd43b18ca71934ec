# SPDX-License-Identifier: MIT
# lrpe_fix_xsimd_xtl()
#
# Debian/Ubuntu's xsimd 8.x package exports an imported target `xsimd` whose
# INTERFACE_LINK_LIBRARIES is "xtl", but does not depend on the xtl package. When no
# target `xtl` exists, CMake turns that item into `-lxtl` and every executable that
# links xsimd fails to link. xsimd only uses xtl for optional xtl::xcomplex support.
#
# This function, called right after find_package(xsimd), tries find_package(xtl) and,
# when xtl is really absent, removes "xtl" from xsimd's INTERFACE_LINK_LIBRARIES.
# It does nothing when there is no `xsimd` target, when it does not name xtl, or when
# an `xtl` target exists. It is used by lrpe's own build and installed with lrpe's
# CMake package (lrpeConfig.cmake calls it), so both the build tree and consumers link.
include_guard(GLOBAL)

function(lrpe_fix_xsimd_xtl)
  if(NOT TARGET xsimd)
    return()
  endif()
  get_target_property(_aliased xsimd ALIASED_TARGET)
  if(_aliased)
    return()  # an alias of a real (e.g. FetchContent) target: nothing to fix
  endif()
  get_target_property(_libs xsimd INTERFACE_LINK_LIBRARIES)
  if(NOT _libs OR NOT "xtl" IN_LIST _libs)
    return()
  endif()
  if(NOT TARGET xtl)
    find_package(xtl QUIET CONFIG)
  endif()
  if(TARGET xtl)
    return()
  endif()
  list(REMOVE_ITEM _libs xtl)
  set_property(TARGET xsimd PROPERTY INTERFACE_LINK_LIBRARIES "${_libs}")
  if(NOT lrpe_FIND_QUIETLY)
    message(STATUS "lrpe: xsimd names the missing package xtl as a link dependency; "
                   "removed it (xtl is optional for xsimd)")
  endif()
endfunction()
