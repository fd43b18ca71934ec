# SPDX-License-Identifier: MIT
# Build settings for lrpe's OWN targets (tests, examples, benches). None of them ever goes
# on the INTERFACE targets lrpe::lrpe / lrpe::simd / lrpe::cuda that users link.
#
#   lrpe_add_warnings(<target>)    -Wall -Wextra -Wpedantic (/W4 on MSVC); -Werror with LRPE_WERROR
#   lrpe_add_native(<target>)      -march=native when LRPE_NATIVE is ON and the compiler takes it
#   lrpe_quiet_gcc12_avx512(<t>)   GCC 12 only: silence its false AVX-512 header warnings
#   lrpe_add_sanitizers(<target>)  ASan + UBSan when LRPE_SANITIZE is ON
#   lrpe_own_target(<target> [NO_SANITIZE])  all three, and CXX_EXTENSIONS OFF
include_guard(GLOBAL)
include(CheckCXXCompilerFlag)

function(lrpe_add_warnings target)
  if(MSVC)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:/W4;/permissive->")
    if(LRPE_WERROR)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:/WX>")
    endif()
  else()
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic>"
      # nvcc: warnings of the host compiler only (-Wpedantic is noise on nvcc's generated code)
      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
    if(LRPE_WERROR)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Werror>")
    endif()
  endif()
endfunction()

function(lrpe_add_native target)
  if(NOT LRPE_NATIVE)
    return()
  endif()
  if(NOT DEFINED LRPE_CXX_HAS_MARCH_NATIVE)
    check_cxx_compiler_flag("-march=native" LRPE_CXX_HAS_MARCH_NATIVE)
  endif()
  if(LRPE_CXX_HAS_MARCH_NATIVE)
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-march=native>"
      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-march=native>")
    lrpe_quiet_gcc12_avx512(${target})
  endif()
endfunction()

# lrpe_quiet_gcc12_avx512(<target>): for targets compiled with AVX-512 enabled (-march=native
# on an AVX-512 machine, -mavx512f). GCC 12's AVX-512 intrinsic headers trigger hundreds of
# false -W(maybe-)uninitialized warnings about `__Y` once Eigen/xsimd use AVX-512 (GCC PR
# 105593, fixed in GCC 13): turn those two warnings off, for GCC < 13 only.
function(lrpe_quiet_gcc12_avx512 target)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-Wno-uninitialized;-Wno-maybe-uninitialized>"
      # nvcc's host compiler is normally the same GCC
      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wno-uninitialized,-Wno-maybe-uninitialized>")
  endif()
endfunction()

function(lrpe_add_sanitizers target)
  if(NOT LRPE_SANITIZE)
    return()
  endif()
  if(MSVC)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:/fsanitize=address>")
    return()
  endif()
  get_target_property(_type ${target} TYPE)
  get_target_property(_sources ${target} SOURCES)
  foreach(_src IN LISTS _sources)
    if(_src MATCHES "\\.cu$")
      message(STATUS "lrpe: ${target} is a CUDA target: built without sanitizers")
      return()
    endif()
  endforeach()
  set(_flags -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_flags}>")
  if(NOT _type STREQUAL "OBJECT_LIBRARY")
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# lrpe_own_target(<target> [NO_SANITIZE]): strict ISO C++ (CXX_EXTENSIONS OFF: -std=c++20,
# not gnu++20), warnings, -march=native and, unless NO_SANITIZE, the sanitizers.
function(lrpe_own_target target)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "NO_SANITIZE" "" "")
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  lrpe_add_warnings(${target})
  lrpe_add_native(${target})
  if(NOT _arg_NO_SANITIZE)
    lrpe_add_sanitizers(${target})
  endif()
endfunction()

# lrpe_add_mpi_test(<name> <labels> <executable>): ctest tests <name>_np1 … <name>_np4, the
# executable under mpiexec on 1 to 4 ranks (with Open MPI oversubscribed, since CI has 2 cores,
# and allowed as root, the way CI containers run: LRPE_MPIEXEC_FLAGS). Each is RUN_SERIAL: its
# ranks already take every core.
function(lrpe_add_mpi_test name labels exe)
  foreach(_np 1 2 3 4)
    add_test(NAME ${name}_np${_np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_np} ${LRPE_MPIEXEC_FLAGS}
                     ${MPIEXEC_PREFLAGS} ${exe} ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}_np${_np} PROPERTIES
      LABELS "${labels}"
      TIMEOUT 300
      RUN_SERIAL ON
      ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
  endforeach()
endfunction()
