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
  // A block's four matrices, each as this rank holds it (found by offset: the llama family
  // lists neither a position embedding nor the empty biases).
  const nn::GptBlockParam matrices[4] = {nn::GptBlockParam::qkv_w, nn::GptBlockParam::proj_w,
                                         nn::GptBlockParam::fc_w, nn::GptBlockParam::fcproj_w};
  for (int j = 0; j < 4; ++j) {
    const int64_t at = l.layers() > 0 ? l.at(l.first_layer(), matrices[j]) : -1;
    const nn::ShardedTensor* s = nullptr;
    for (const nn::ShardedTensor& t : l.tensors())
      if (t.offset == at && t.numel > 0) s = &t;
    L.decay_begin[j] = l.in_layer(matrices[j]);
    L.decay_end[j] = L.decay_begin[j];
    if (!s) continue;  // a pipeline stage without layers
    AISCALE_CUDA_REQUIRE(s->full.is_matrix, "AdamW: a GPT block matrix is not a matrix");
    L.decay_end[j] = L.decay_begin[j] + s->numel;
  }
  // An untied LM head after the final norm: a matrix, decayed.
  for (const nn::ShardedTensor& t : l.tensors())
    if (t.full.layer < 0 && t.offset > l.lnf_w() && t.full.is_matrix) {
      L.tail_decay_begin = t.offset;
      L.tail_decay_end = t.offset + t.numel;
    }
  L.work_split = l.tensors().front().numel;  // the token embedding's rows end (== l.wpe())
  L.work_shift = work_shift;
  return L;
}

cuda::AdamWLayout gpt_adamw_layout(const nn::GptLayout& layout, bool decay_embeddings,
                                   int64_t work_shift) {
  // One rank holding every layer: the GPT layout itself.
  return gpt_adamw_layout(nn::GptShardLayout(layout.config(), 1, 0), decay_embeddings, work_shift);
}

}  // namespace aiscale::nn
