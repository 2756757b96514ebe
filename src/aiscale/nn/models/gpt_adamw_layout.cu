#include "aiscale/nn/models/gpt_adamw_layout.cuh"

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn {

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

cuda::AdamWLayout gpt_adamw_layout(const nn::GptLayout& layout, bool decay_embeddings,
                                   int64_t work_shift) {
  // One rank holding every layer: the GPT layout itself.
  return gpt_adamw_layout(nn::GptShardLayout(layout.config(), 1, 0), decay_embeddings, work_shift);
}

}  // namespace aiscale::nn
