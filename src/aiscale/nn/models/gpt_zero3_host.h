// ZeRO-3's optimizer step on the host (parallel.offload_optimizer): AdamW over this
// rank's shards in pinned host memory, weight decay by the tensor each value belongs to,
// then the new working-copy shard rounded to the run's dtype. Plain C++ (the CPU's
// AdamW kernel, ops/cpu), so that it is tested without a GPU.
#pragma once
#include "aiscale/core/dtype.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/nn/models/gpt_zero3_layout.h"
#include "aiscale/ops/ops.h"

namespace aiscale::nn {

// master, m, v, grads: shards_size() floats; work: shards_size() values of t. Values in
// the padded vocabulary rows and the shards' padding are left as they are (zero).
void zero3_host_adamw(const GptZero3Layout& z, const nn::GptLayout& layout, bool decay_embeddings,
                      float* master, float* m, float* v, const float* grads, void* work, DType t,
                      const ops::AdamWParams& hp);
// The same over a tensor rank's local buffer (its shard layout, the shards' flat positions).
void zero3_host_adamw(const GptZero3Layout& z, const nn::GptShardLayout& layout,
                      bool decay_embeddings, float* master, float* m, float* v,
                      const float* grads, void* work, DType t, const ops::AdamWParams& hp);

}  // namespace aiscale::nn
