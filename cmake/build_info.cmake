# Run at every build (cmake -P): writes OUT with the source tree's `git describe --always
# --dirty`, or "unknown" where the tree is not a git checkout (a tarball) or git is
# missing. OUT is rewritten only when its text changes, so an unchanged commit
# recompiles nothing.
cmake_minimum_required(VERSION 3.25)
set(AISCALE_GIT_DESCRIBE "unknown")
if(EXISTS "${SOURCE_DIR}/.git")
  find_program(GIT_EXECUTABLE git)
  if(GIT_EXECUTABLE)
    execute_process(COMMAND "${GIT_EXECUTABLE}" describe --always --dirty
      WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE out RESULT_VARIABLE rc
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(rc EQUAL 0 AND NOT out STREQUAL "")
      set(AISCALE_GIT_DESCRIBE "${out}")
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/build_info.cmake; do not edit.\n#define AISCALE_GIT_DESCRIBE \"${AISCALE_GIT_DESCRIBE}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
