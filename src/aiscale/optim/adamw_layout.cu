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

cuda::AdamWLayout gpt_adamw_layout(const nn::GptShardLayout& l, bool decay_embeddings,
                                   int64_t work_shift) {
  cuda::AdamWLayout L;
  L.n = l.size();
  L.embeddings_end = l.layers_begin();
  L.decay_embeddings = decay_embeddings;
  L.layers_begin = l.layers_begin();
  L.layer_size = l.layer_size();
  L.n_layer = l.layers();
  // A block's four matrices, each as this rank holds it.
  const nn::GptBlockParam matrices[4] = {nn::GptBlockParam::qkv_w, nn::GptBlockParam::proj_w,
                                         nn::GptBlockParam::fc_w, nn::GptBlockParam::fcproj_w};
  for (int j = 0; j < 4; ++j) {
    const nn::ShardedTensor& s = l.tensors()[2 + static_cast<int>(matrices[j])];
    AISCALE_CUDA_REQUIRE(s.full.is_matrix, "AdamW: a GPT block matrix is not a matrix");
    L.decay_begin[j] = l.in_layer(matrices[j]);
    L.decay_end[j] = L.decay_begin[j] + s.numel;
  }
  L.work_split = l.wpe();
  L.work_shift = work_shift;
  return L;
}

}  // namespace aiscale::optim
