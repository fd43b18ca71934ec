# SPDX-License-Identifier: MIT
# lrpe_simd_dispatch(<target> SOURCES <src>... [ARCHS <arch>...])
#
# Runtime dispatch for the SIMD backend (xsimd::dispatch): compiles every <src> once per xsimd
# arch into an object library with that arch's compiler flags and
#   -DLRPE_SIMD_DISPATCH_ARCH=xsimd::<arch>
# links the objects into <target>, and defines LRPE_SIMD_DISPATCH=1 on <target>. Each source
# should hold only explicit instantiations of `operator()<Arch>` of a functor that
# `xsimd::dispatch<xsimd::arch_list<...>>` calls (see bench/dispatch/). The header-only default
# stays compile-time (`backend::simd<>` = xsimd::default_arch of the including TU).
# Installed with lrpe's CMake package: `find_package(lrpe COMPONENTS simd)` defines it.
#
# ARCHS defaults to "avx512bw;avx2;sse2". Known arches: avx512bw avx512f avx2 fma3_avx2 avx sse4_2
# sse2. The per-arch objects do not get -march=native (lrpe_add_native is not applied to them).
# Caveat (as for any per-arch TU scheme): non-template inline code that the objects share with
# the rest of the program is compiled with each arch's flags and the linker keeps one copy; keep
# the per-arch sources to Arch-templated kernels, and run the result on CPUs that have every
# listed arch only if that copy could be the widest one (docs/backends.md).
include_guard(GLOBAL)

function(lrpe_simd_dispatch target)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "" "" "SOURCES;ARCHS")
  if(NOT _arg_SOURCES)
    message(FATAL_ERROR "lrpe_simd_dispatch(${target}): SOURCES is required")
  endif()
  if(NOT _arg_ARCHS)
    set(_arg_ARCHS avx512bw avx2 sse2)
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(STATUS "lrpe_simd_dispatch(${target}): only GCC/Clang flags are known; skipped")
    return()
  endif()
  set(_flags_avx512bw -mavx512f -mavx512cd -mavx512dq -mavx512bw -mfma -mavx2 -mbmi -mbmi2)
  set(_flags_avx512f -mavx512f -mavx512cd -mfma -mavx2)
  set(_flags_avx2 -mavx2 -mfma)
  set(_flags_fma3_avx2 -mavx2 -mfma)
  set(_flags_avx -mavx)
  set(_flags_sse4_2 -msse4.2)
  set(_flags_sse2 -msse2)
  foreach(_arch IN LISTS _arg_ARCHS)
    if(NOT DEFINED _flags_${_arch})
      message(FATAL_ERROR "lrpe_simd_dispatch(${target}): unknown arch '${_arch}'")
    endif()
    set(_obj ${target}_simd_${_arch})
    add_library(${_obj} OBJECT ${_arg_SOURCES})
    target_link_libraries(${_obj} PRIVATE lrpe::simd)
    target_compile_options(${_obj} PRIVATE ${_flags_${_arch}})
    target_compile_definitions(${_obj} PRIVATE LRPE_SIMD_DISPATCH_ARCH=xsimd::${_arch} LRPE_SIMD_DISPATCH=1)
    set_target_properties(${_obj} PROPERTIES CXX_EXTENSIONS OFF)
    if(COMMAND lrpe_add_warnings)
      lrpe_add_warnings(${_obj})
    endif()
    if(_arch MATCHES "^avx512" AND COMMAND lrpe_quiet_gcc12_avx512)
      lrpe_quiet_gcc12_avx512(${_obj})
    endif()
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${_obj}>)
  endforeach()
  target_compile_definitions(${target} PRIVATE LRPE_SIMD_DISPATCH=1)
endfunction()
