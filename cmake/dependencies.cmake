# The small C++ libraries aiscale builds against: CLI11, nlohmann-json, toml++ and fmt.
#
# Each comes from one of two places, and nothing is ever downloaded:
#  - a source folder the user names with FetchContent's own override variable,
#    FETCHCONTENT_SOURCE_DIR_<NAME> (CLI11, NLOHMANN_JSON, TOMLPLUSPLUS, FMT): an upstream
#    release tree (its CMakeLists.txt is added as a subproject) or a bare header tree (the
#    folder holding CLI/, nlohmann/, toml++/ or fmt/, or its include/ subfolder), which
#    becomes a header-only target. A named folder wins over the system's copy;
#  - otherwise the system's package through find_package (Debian: libcli11-dev,
#    nlohmann-json3-dev, libtomlplusplus-dev, libfmt-dev; scripts/setup.sh installs them).
# CMAKE_DISABLE_FIND_PACKAGE_<Name>=ON hides a system package, so a build can prove that it
# uses the named folder (.ci/check_dependencies.sh does).
include(FetchContent)
# FetchContent never reaches the network from this project: populated content is a named
# source folder or nothing.
set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL "FetchContent never downloads (aiscale)")

# aiscale_dependency(<package> <content name> <target> <header folder> <debian package>
#                    [DEFINITIONS defs...])
# Makes <target> (e.g. CLI11::CLI11) from FETCHCONTENT_SOURCE_DIR_<CONTENT NAME> or from
# find_package(<package>). DEFINITIONS are the compile definitions a bare header tree needs
# to be used without a compiled library (fmt's FMT_HEADER_ONLY).
function(aiscale_dependency package content target header_folder debian_package)
  cmake_parse_arguments(PARSE_ARGV 5 arg "" "" "DEFINITIONS")
  string(TOUPPER "${content}" upper)
  set(source_var FETCHCONTENT_SOURCE_DIR_${upper})
  if(DEFINED ${source_var} AND NOT "${${source_var}}" STREQUAL "")
    set(dir "${${source_var}}")
    if(NOT IS_DIRECTORY "${dir}")
      message(FATAL_ERROR "${source_var}=${dir} is not a folder: name the ${package} source tree "
                          "(or a folder holding its ${header_folder}/ headers), or unset it to use "
                          "the system's ${debian_package}")
    endif()
    FetchContent_Declare(${content} SOURCE_DIR "${dir}")
    FetchContent_MakeAvailable(${content})
    if(NOT TARGET ${target})
      # A bare header tree: the headers are in <dir>/include/<header_folder> or <dir>/<header_folder>.
      if(IS_DIRECTORY "${dir}/include/${header_folder}")
        set(include_dir "${dir}/include")
      elseif(IS_DIRECTORY "${dir}/${header_folder}")
        set(include_dir "${dir}")
      else()
        message(FATAL_ERROR "${source_var}=${dir} has neither a CMakeLists.txt nor a "
                            "${header_folder}/ folder (directly or under include/): name the "
                            "${package} source tree")
      endif()
      string(REPLACE "::" "_" local "aiscale_dep_${target}")
      add_library(${local} INTERFACE)
      target_include_directories(${local} SYSTEM INTERFACE "${include_dir}")
      target_compile_definitions(${local} INTERFACE ${arg_DEFINITIONS})
      add_library(${target} ALIAS ${local})
      set(where "header tree ${include_dir}")
    else()
      set(where "source tree ${dir}")
    endif()
    message(STATUS "aiscale: ${package} from the ${where}")
    return()
  endif()
  find_package(${package} QUIET)
  if(NOT ${package}_FOUND OR NOT TARGET ${target})
    message(FATAL_ERROR "${package} not found: install Debian's ${debian_package} (scripts/setup.sh), "
                        "or name its source folder with -D${source_var}=<folder>")
  endif()
  message(STATUS "aiscale: ${package} from the system (${${package}_DIR})")
endfunction()

aiscale_dependency(CLI11 cli11 CLI11::CLI11 CLI libcli11-dev)
aiscale_dependency(nlohmann_json nlohmann_json nlohmann_json::nlohmann_json nlohmann nlohmann-json3-dev)
aiscale_dependency(tomlplusplus tomlplusplus tomlplusplus::tomlplusplus toml++ libtomlplusplus-dev)
aiscale_dependency(fmt fmt fmt::fmt fmt libfmt-dev DEFINITIONS FMT_HEADER_ONLY=1)

# GoogleTest, for tests/ (BUILD_TESTING): the system's (Debian's libgtest-dev) or the source
# tree named by FETCHCONTENT_SOURCE_DIR_GOOGLETEST (Debian's googletest package installs one
# at /usr/src/googletest), built here with the project's compiler and sanitizer flags.
macro(aiscale_googletest)
  if(FETCHCONTENT_SOURCE_DIR_GOOGLETEST)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    FetchContent_Declare(googletest SOURCE_DIR "${FETCHCONTENT_SOURCE_DIR_GOOGLETEST}")
    FetchContent_MakeAvailable(googletest)
    if(NOT TARGET gtest OR NOT TARGET gtest_main)
      message(FATAL_ERROR "FETCHCONTENT_SOURCE_DIR_GOOGLETEST=${FETCHCONTENT_SOURCE_DIR_GOOGLETEST} "
                          "defines no gtest and gtest_main targets: name GoogleTest's source tree "
                          "(e.g. /usr/src/googletest)")
    endif()
    foreach(lib gtest gtest_main)
      if(NOT TARGET GTest::${lib})
        add_library(GTest::${lib} ALIAS ${lib})
      endif()
    endforeach()
    message(STATUS "aiscale: GoogleTest from the source tree ${FETCHCONTENT_SOURCE_DIR_GOOGLETEST}")
  else()
    find_package(GTest QUIET)
    if(NOT GTest_FOUND)
      message(FATAL_ERROR "GoogleTest not found: install Debian's libgtest-dev (scripts/setup.sh), "
                          "or name its source tree with -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=<folder> "
                          "(e.g. /usr/src/googletest), or configure with -DBUILD_TESTING=OFF")
    endif()
  endif()
endmacro()
