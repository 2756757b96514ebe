// make_gpt_cuda for builds without CUDA: a clear error instead of a link failure.
#ifndef AISCALE_HAVE_CUDA
#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"

namespace aiscale::nn {
std::unique_ptr<GptModel> make_gpt_cuda(const GptConfig&, const GptRunOptions&) {
  fail("this aiscale was built without CUDA: rebuild with `cmake --preset cuda` on a machine with "
       "nvcc, or set train.device = \"cpu\"");
}
bool cuda_available() { return false; }
}  // namespace aiscale::nn
#endif
