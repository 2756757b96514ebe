// What one rank of a run's layout allocates for the model's state, from the engine's own
// layouts: the tensor slice and pipeline stage of GptShardLayout (nn/models/gpt_shard.h),
// ZeRO's shards of its units (optim/zero_shards.h on CPU ranks, GptZero3Layout on GPU
// ranks), and the streamed checkpoint's staging (train/checkpoint_stream.h). Configuration
// checks bound each buffer by validate::kMaxBufferBytes: the whole model is no buffer
// anywhere once it is sharded, sliced or staged (GPT-3 175B under ZeRO-3 or tp x pp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/train/config.h"
#include "aiscale/train/parallel_layout.h"

namespace aiscale::train {

struct RankBuffer {
  std::string name;   // e.g. "parameters (fp32)", "device allocation (model state)"
  uint64_t bytes = 0;
};

// The largest rank's buffers (the pipeline stage with the most layers; stage 0's
// embeddings counted on every stage), one entry per allocation. A GPU rank's model state
// is one device allocation (nn/models/gpt_cuda_memory.cuh): its parts add up.
std::vector<RankBuffer> rank_state_buffers(const TrainConfig& c, const ParallelLayout& l);
// Values of whole-model state the run's ranks stage while a checkpoint is written: one
// range of kCheckpointChunkBytes where the state streams (GPU ranks in every layout, CPU
// ranks where it is sharded), plus the writer's transposition buffer of the same size; the
// whole model's three vectors (params, m, v) where every CPU rank holds them whole anyway
// (DDP, CPU ZeRO-1 on one rank).
uint64_t checkpoint_staging_bytes(const TrainConfig& c, const ParallelLayout& l);

// Fails when one of the rank's buffers exceeds validate::kMaxBufferBytes, naming it, its
// size, the layout and the keys that shrink it (parallel.zero_stage, parallel.tensor_parallel,
// parallel.pipeline_parallel, more ranks).
void check_rank_buffers(const TrainConfig& c, const ParallelLayout& l);

}  // namespace aiscale::train
