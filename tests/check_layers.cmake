# SPDX-License-Identifier: MIT
# The include graph of include/lrpe against the layer order of the design (docs/architecture.md):
# a header may include headers of its own layer or of a layer before it, never one after it.
#   cmake -DLRPE_INCLUDE_DIR=<repo>/include -P tests/check_layers.cmake
# Exits non-zero naming every header that includes a later layer.
cmake_minimum_required(VERSION 3.25)
if(NOT LRPE_INCLUDE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DLRPE_INCLUDE_DIR=<repo>/include")
endif()

# Layers in order; a header's layer is the first pattern that matches its path under lrpe/.
# freq/ comes before lambda/: the rotation and phase policies take a frequency schedule.
# Within backend/, reference (the oracle) comes before the backends that fall back to it.
set(_layers
  "core:^(core|detail)/"
  "freq:^freq/"
  "p:^p/"
  "lambda:^lambda/"
  "encoder:^(encoder|presets)\\.hpp$"
  "canonical:^canonical/"
  "attention:^attention/"
  "absolute:^absolute/"
  "backend-reference:^backend/reference(/|\\.hpp$)"
  "backend:^backend/"
  "check:^check/"
  "interop:^interop/"
  "mpi:^mpi/"
  "entry:^(lrpe|simd|mpi)\\.hpp$|^cuda\\.cuh$")

function(_lrpe_layer_of path out_index out_name)
  set(_i 0)
  foreach(_entry IN LISTS _layers)
    string(FIND "${_entry}" ":" _colon)
    string(SUBSTRING "${_entry}" 0 ${_colon} _name)
    math(EXPR _from "${_colon} + 1")
    string(SUBSTRING "${_entry}" ${_from} -1 _regex)
    if(path MATCHES "${_regex}")
      set(${out_index} ${_i} PARENT_SCOPE)
      set(${out_name} ${_name} PARENT_SCOPE)
      return()
    endif()
    math(EXPR _i "${_i} + 1")
  endforeach()
  set(${out_index} -1 PARENT_SCOPE)
  set(${out_name} "" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE _headers RELATIVE "${LRPE_INCLUDE_DIR}/lrpe" "${LRPE_INCLUDE_DIR}/lrpe/*.hpp"
     "${LRPE_INCLUDE_DIR}/lrpe/*.cuh")
list(SORT _headers)
set(_violations "")
set(_edges 0)
foreach(_h IN LISTS _headers)
  _lrpe_layer_of("${_h}" _hi _hn)
  if(_hi EQUAL -1)
    string(APPEND _violations "  lrpe/${_h}: in no layer (add it to tests/check_layers.cmake and docs/architecture.md)\n")
    continue()
  endif()
  file(STRINGS "${LRPE_INCLUDE_DIR}/lrpe/${_h}" _includes REGEX "^[ \t]*#[ \t]*include[ \t]*<lrpe/")
  foreach(_line IN LISTS _includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*<lrpe/([^>]+)>.*$" "\\1" _dep "${_line}")
    math(EXPR _edges "${_edges} + 1")
    _lrpe_layer_of("${_dep}" _di _dn)
    if(_di EQUAL -1)
      string(APPEND _violations "  lrpe/${_h} includes lrpe/${_dep}, which is in no layer\n")
    elseif(_di GREATER _hi)
      string(APPEND _violations "  lrpe/${_h} (${_hn}) includes lrpe/${_dep} (${_dn}, a later layer)\n")
    endif()
  endforeach()
endforeach()
list(LENGTH _headers _count)
if(_violations)
  message(FATAL_ERROR "lrpe: the include graph breaks the layer order:\n${_violations}")
endif()
if(_count LESS 50 OR _edges LESS 100)
  message(FATAL_ERROR "lrpe: check_layers read only ${_count} headers and ${_edges} includes under ${LRPE_INCLUDE_DIR}")
endif()
message(STATUS "lrpe: ${_count} headers, ${_edges} lrpe includes, all in layer order")
