# SPDX-License-Identifier: MIT
# lrpe_read_version(<header> <out-var>)
#
# Reads the three `#define LRPE_VERSION_{MAJOR,MINOR,PATCH} <n>` lines of <header>
# (include/lrpe/core/config.hpp, the single source of the version) and sets <out-var>
# to "MAJOR.MINOR.PATCH". Fails loudly when a line is missing.
include_guard(GLOBAL)

function(lrpe_read_version header out_var)
  if(NOT EXISTS "${header}")
    message(FATAL_ERROR "lrpe: cannot read the version: ${header} does not exist")
  endif()
  file(STRINGS "${header}" _lines
       REGEX "^[ \t]*#[ \t]*define[ \t]+LRPE_VERSION_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  set(_parts "")
  foreach(_part MAJOR MINOR PATCH)
    set(_value "")
    foreach(_line IN LISTS _lines)
      if(_line MATCHES "LRPE_VERSION_${_part}[ \t]+([0-9]+)")
        set(_value "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    if(_value STREQUAL "")
      message(FATAL_ERROR
        "lrpe: ${header} has no line `#define LRPE_VERSION_${_part} <number>`")
    endif()
    list(APPEND _parts "${_value}")
  endforeach()
  list(JOIN _parts "." _version)
  set(${out_var} "${_version}" PARENT_SCOPE)
endfunction()
