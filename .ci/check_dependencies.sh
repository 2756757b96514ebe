#!/usr/bin/env bash
# Configures and builds aiscale with its small dependencies taken from source folders
# (cmake/dependencies.cmake) while the system's packages are hidden from find_package:
# CLI11, nlohmann-json, toml++ and fmt from header trees copied out of Debian's installed
# headers, GoogleTest from the source tree Debian's googletest package installs
# (/usr/src/googletest). Checks that the configure step reports each folder, that the
# compile commands use them, and builds GoogleTest and one object of the project per
# library from them.
# usage: bash .ci/check_dependencies.sh [BUILD_DIR (default build/ci-deps)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build/ci-deps}
src="$build/sources"  # inside the build folder: a fixed path, so ccache hits across runs
rm -rf "$src"
mkdir -p "$src"
copy_headers() {  # NAME FOLDER: $src/NAME/include/FOLDER <- /usr/include/FOLDER
  [ -d "/usr/include/$2" ] || { echo "check_dependencies: /usr/include/$2 missing (run scripts/setup.sh)"; exit 1; }
  mkdir -p "$src/$1/include"
  cp -r "/usr/include/$2" "$src/$1/include/"
}
copy_headers cli11 CLI
copy_headers nlohmann_json nlohmann
copy_headers tomlplusplus toml++
copy_headers fmt fmt
[ -f /usr/src/googletest/CMakeLists.txt ] || { echo "check_dependencies: /usr/src/googletest missing (apt package googletest)"; exit 1; }
abs=$(cd "$src" && pwd)
log="$build/configure.log"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAISCALE_CUDA=OFF \
  ${AISCALE_CCACHE:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache} \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_tomlplusplus=ON -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DFETCHCONTENT_SOURCE_DIR_CLI11="$abs/cli11" \
  -DFETCHCONTENT_SOURCE_DIR_NLOHMANN_JSON="$abs/nlohmann_json" \
  -DFETCHCONTENT_SOURCE_DIR_TOMLPLUSPLUS="$abs/tomlplusplus" \
  -DFETCHCONTENT_SOURCE_DIR_FMT="$abs/fmt" \
  -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest >"$log" 2>&1 \
  || { cat "$log"; echo "check_dependencies: configure FAILED"; exit 1; }
fail=0
for want in "CLI11 from the header tree $abs/cli11/include" \
            "nlohmann_json from the header tree $abs/nlohmann_json/include" \
            "tomlplusplus from the header tree $abs/tomlplusplus/include" \
            "fmt from the header tree $abs/fmt/include" \
            "GoogleTest from the source tree /usr/src/googletest"; do
  grep -qF "aiscale: $want" "$log" || { echo "check_dependencies: configure did not report '$want'"; fail=1; }
done
grep -q "from the system" "$log" && { grep "from the system" "$log"; echo "check_dependencies: a system package was used"; fail=1; }
# One object per library, compiled from the copied headers (fmt header-only).
objects=(CMakeFiles/aiscale_lib.dir/src/aiscale/cli/cmd_data.cpp.o          # CLI11
         CMakeFiles/aiscale_lib.dir/src/aiscale/train/config_validate.cpp.o # toml++
         CMakeFiles/aiscale_lib.dir/src/aiscale/core/exception_text.cpp.o   # nlohmann-json, fmt
         CMakeFiles/aiscale_lib.dir/src/aiscale/cli/cmd_launch.cpp.o)       # fmt
for o in "${objects[@]}"; do
  src_file=${o#CMakeFiles/aiscale_lib.dir/}; src_file=${src_file%.o}
  cmd=$(python3 -c 'import json,sys; print(next(e["command"] for e in json.load(open(sys.argv[1])) if e["file"].endswith(sys.argv[2])))' \
        "$build/compile_commands.json" "$src_file")
  for dep in cli11 nlohmann_json tomlplusplus fmt; do
    [[ $cmd == *"$abs/$dep/include"* ]] || { echo "check_dependencies: $src_file is not compiled with $abs/$dep/include"; fail=1; }
  done
  [[ $cmd == *FMT_HEADER_ONLY=1* ]] || { echo "check_dependencies: $src_file is compiled without FMT_HEADER_ONLY"; fail=1; }
done
[ $fail = 0 ] || exit 1
cmake --build "$build" --target gtest gtest_main "${objects[@]}" -- -j"$(nproc)" >"$build/build.log" 2>&1 \
  || { tail -40 "$build/build.log"; echo "check_dependencies: build FAILED"; exit 1; }
echo "check_dependencies: CLI11, nlohmann-json, toml++, fmt and GoogleTest from source folders: configured and built"
