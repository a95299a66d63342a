# cmake/fingerprint.cmake on a small source tree in a scratch folder: the same bytes give the
# same fingerprint (in any order, from any folder) and leave the generated source untouched;
# a change to one file's bytes or path, or to the settings, gives another.
#
#   cmake -DSCRIPT=<cmake/fingerprint.cmake> -DWORK=<scratch folder> -P fingerprint_test.cmake

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# Fails the test with `message` unless the condition that follows it holds.
function(expect message)
  if(NOT (${ARGN}))
    message(FATAL_ERROR "fingerprint_test: ${message}")
  endif()
endfunction()

# Writes the small source set under `root`.
function(write_sources root)
  file(WRITE "${root}/compiler/a.cc" "int A() { return 1; }\n")
  file(WRITE "${root}/compiler/a.h" "int A();\n")
  file(WRITE "${root}/compiler/sub/b.cc" "int B() { return 2; }\n")
  file(WRITE "${root}/proto/abi.h" "constexpr int kAbi = 1;\n")
endfunction()

# Runs the script as the build does (a separate `cmake -P`) over the files listed in
# `list_file`, and sets `out_var` to the fingerprint the generated source defines.
function(fingerprint root list_file settings out_var)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DROOT=${root} -DFILES=${list_file} -DSETTINGS=${settings}
            -DOUTPUT=${root}/gen/fingerprint.cc -P ${SCRIPT}
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  expect("the script failed on ${root}: ${err}" rc EQUAL 0)
  file(READ "${root}/gen/fingerprint.cc" text)
  string(REGEX MATCH "kCompilerFingerprint\\[\\] = \"([0-9a-f]+)\";" found "${text}")
  string(LENGTH "${CMAKE_MATCH_1}" length)
  expect("no fingerprint in ${root}/gen/fingerprint.cc:\n${text}" length EQUAL 64)
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

function(modified path out_var)
  file(TIMESTAMP "${path}" stamp "%Y%m%d%H%M%S%f" UTC)
  set(${out_var} "${stamp}" PARENT_SCOPE)
endfunction()

set(list "${WORK}/files.txt")
file(WRITE "${list}" "compiler/sub/b.cc\ncompiler/a.h\nproto/abi.h\ncompiler/a.cc\n")
set(settings "cxx Clang 16.0.6, llvm 16.0.6")
set(tree "${WORK}/tree")
write_sources("${tree}")

fingerprint("${tree}" "${list}" "${settings}" first)
modified("${tree}/gen/fingerprint.cc" written)
fingerprint("${tree}" "${list}" "${settings}" again)
expect("same bytes gave ${first}, then ${again}" first STREQUAL again)
modified("${tree}/gen/fingerprint.cc" rewritten)
expect("an unchanged run rewrote the generated source" written STREQUAL rewritten)

# Another order of the list and another folder holding the same bytes.
set(shuffled "${WORK}/shuffled.txt")
file(WRITE "${shuffled}" "proto/abi.h\ncompiler/a.cc\ncompiler/sub/b.cc\ncompiler/a.h\n")
set(copy "${WORK}/elsewhere/tree")
write_sources("${copy}")
fingerprint("${copy}" "${shuffled}" "${settings}" moved)
expect("the order of the list or the folder changed the fingerprint" first STREQUAL moved)

# One changed byte in one file; then the same bytes again.
file(WRITE "${tree}/compiler/sub/b.cc" "int B() { return 3; }\n")
fingerprint("${tree}" "${list}" "${settings}" changed)
expect("changing compiler/sub/b.cc kept ${first}" NOT first STREQUAL changed)
modified("${tree}/gen/fingerprint.cc" regenerated)
expect("a new fingerprint was not written" NOT written STREQUAL regenerated)
file(WRITE "${tree}/compiler/sub/b.cc" "int B() { return 2; }\n")
fingerprint("${tree}" "${list}" "${settings}" restored)
expect("restoring the bytes did not restore the fingerprint" first STREQUAL restored)

# The same bytes under another path (that sorts in the same place).
file(RENAME "${copy}/proto/abi.h" "${copy}/proto/abi2.h")
set(renamed "${WORK}/renamed.txt")
file(WRITE "${renamed}" "compiler/sub/b.cc\ncompiler/a.h\nproto/abi2.h\ncompiler/a.cc\n")
fingerprint("${copy}" "${renamed}" "${settings}" moved_file)
expect("renaming a file kept the fingerprint" NOT first STREQUAL moved_file)

# Other build settings.
fingerprint("${tree}" "${list}" "cxx Clang 17.0.1, llvm 16.0.6" other_settings)
expect("other build settings kept the fingerprint" NOT first STREQUAL other_settings)

# A listed file that is missing fails the build instead of being left out.
file(WRITE "${WORK}/missing.txt" "compiler/a.cc\ncompiler/gone.cc\n")
execute_process(
  COMMAND ${CMAKE_COMMAND} -DROOT=${tree} -DFILES=${WORK}/missing.txt -DSETTINGS=${settings}
          -DOUTPUT=${tree}/gen/missing.cc -P ${SCRIPT}
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
expect("a missing input did not fail the script" NOT rc EQUAL 0)

message(STATUS "fingerprint_test: passed (${first})")
