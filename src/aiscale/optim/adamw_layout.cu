#include "aiscale/optim/adamw_layout.cuh"

#include <string>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::optim {

cuda::AdamWLayout gpt_adamw_layout(const nn::GptLayout& layout, bool decay_embeddings,
                                   int64_t work_shift) {
  cuda::AdamWLayout L;
  L.n = layout.size();
  L.embeddings_end = layout.embeddings_end();
  L.decay_embeddings = decay_embeddings;
  L.layers_begin = layout.layers_begin();
  L.layer_size = layout.layer_size();
  L.n_layer = layout.config().n_layer;
  int j = 0;
  for (const auto& p : layout.tensors()) {
    if (p.layer != 0 || !p.is_matrix) continue;
    AISCALE_CUDA_REQUIRE(j < 4, "AdamW: a GPT block has more than four matrices");
    L.decay_begin[j] = p.offset - layout.layer_begin(0);
    L.decay_end[j] = L.decay_begin[j] + p.shape.numel();
    ++j;
  }
  AISCALE_CUDA_REQUIRE(j == 4, "AdamW: a GPT block has " + std::to_string(j) + " matrices, not four");
  L.work_split = layout.wpe();
  L.work_shift = work_shift;
  return L;
}

}  // namespace aiscale::optim
