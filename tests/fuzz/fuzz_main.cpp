// One libFuzzer program per target: AISCALE_FUZZ_TARGET (set by CMakeLists.txt) names the
// function of targets.h that this program fuzzes.
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return aiscale::fuzz::AISCALE_FUZZ_TARGET(data, size);
}
