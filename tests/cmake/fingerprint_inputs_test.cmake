# The compiler fingerprint's inputs (the list compiler/CMakeLists.txt writes for
# cmake/fingerprint.cmake) hold every file in REQUIRED, '|'-separated paths from the source
# root: a file that decides what the compiler emits but is missing from the list could change
# without changing compile keys, and a cache would serve code the compiler no longer makes.
#
#   cmake -DINPUTS=<compiler_fingerprint_inputs.txt> -DREQUIRED=<a|b|...> \
#         -P fingerprint_inputs_test.cmake

file(STRINGS "${INPUTS}" inputs)
string(REPLACE "|" ";" required "${REQUIRED}")
list(LENGTH required count)
if(count EQUAL 0)
  message(FATAL_ERROR "fingerprint_inputs_test: no required files given")
endif()
set(missing)
foreach(path IN LISTS required)
  list(FIND inputs "${path}" at)
  if(at EQUAL -1)
    list(APPEND missing "${path}")
  endif()
endforeach()
if(missing)
  list(JOIN missing ", " missing)
  message(FATAL_ERROR "fingerprint_inputs_test: not inputs of the compiler fingerprint: ${missing}")
endif()
message(STATUS "fingerprint_inputs_test: passed (${count} files)")
