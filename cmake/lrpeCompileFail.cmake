# SPDX-License-Identifier: MIT
# Must-not-compile check, run by ctest as
#   cmake -DSOURCE=<file> -DBINARY_DIR=<build dir> -DTARGET=<object target>
#         [-DCONFIG=<config>] -P lrpeCompileFail.cmake
#
# <file> must contain a line `// expect-error: <regex>` (a CMake regular expression; several
# such lines: every one must match). The check builds the EXCLUDE_FROM_ALL object target
# <target> (which compiles only <file>, with exactly the flags of lrpe's tests) and PASSES
# only when that build FAILS and its output matches every regex. Before matching, the path
# of <file> is replaced by "<source>" in the output, so a regex cannot match the file name.
foreach(_var SOURCE BINARY_DIR TARGET)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "lrpeCompileFail.cmake: -D${_var}=... is required")
  endif()
endforeach()

file(STRINGS "${SOURCE}" _expect_lines REGEX "//[ \t]*expect-error:")
set(_regexes "")
foreach(_line IN LISTS _expect_lines)
  string(REGEX REPLACE "^.*//[ \t]*expect-error:[ \t]*" "" _re "${_line}")
  string(STRIP "${_re}" _re)
  if(NOT _re STREQUAL "")
    list(APPEND _regexes "${_re}")
  endif()
endforeach()
if(NOT _regexes)
  message(FATAL_ERROR
    "${SOURCE}: no `// expect-error: <regex>` line. A must-not-compile test must say which "
    "diagnostic it expects, so that it cannot pass because of an unrelated error.")
endif()

set(_build_args --build "${BINARY_DIR}" --target "${TARGET}")
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  list(APPEND _build_args --config "${CONFIG}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" ${_build_args}
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE _out)

if(_rc EQUAL 0)
  message("${_out}")
  message(FATAL_ERROR "${SOURCE} compiled, but it must not compile "
                      "(expected an error matching: ${_regexes})")
endif()

get_filename_component(_name "${SOURCE}" NAME)
string(REPLACE "${SOURCE}" "<source>" _clean "${_out}")
string(REPLACE "${_name}" "<source>" _clean "${_clean}")
set(_missing "")
foreach(_re IN LISTS _regexes)
  if(NOT _clean MATCHES "${_re}")
    list(APPEND _missing "${_re}")
  endif()
endforeach()
if(_missing)
  message("${_out}")
  message(FATAL_ERROR "${SOURCE} failed to compile, as it should, but the compiler output "
                      "(above) does not match: ${_missing}")
endif()
message(STATUS "${SOURCE} fails to compile as expected (matched: ${_regexes})")
