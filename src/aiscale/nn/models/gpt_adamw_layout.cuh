// The fused AdamW kernel's view of a GPT model (ops/cuda/adamw.cu): which flat ranges get
// weight decay and where the working copy's padded vocabulary rows shift the indices,
// derived from the model's one parameter layout.
#pragma once
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::nn {

// Decay: the embeddings if decay_embeddings, each block's matrices. The working copy has
// `work_shift` extra values (the padded vocabulary rows) after wte.
cuda::AdamWLayout gpt_adamw_layout(const nn::GptLayout& layout, bool decay_embeddings,
                                   int64_t work_shift);
// The same over one rank's local buffer: its tensor-parallel slices of every block, or a
// pipeline stage's layers (gpt_shard.h); the embeddings and the final norm as held.
cuda::AdamWLayout gpt_adamw_layout(const nn::GptShardLayout& layout, bool decay_embeddings,
                                   int64_t work_shift);

}  // namespace aiscale::nn
