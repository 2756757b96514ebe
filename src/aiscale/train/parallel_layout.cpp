#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/rank_buffers.h"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"

namespace aiscale::train {

void check_parallel_config(const TrainConfig& c) {
  const int64_t tp = c.tensor_parallel, pp = c.pipeline_parallel;
  const nn::GptConfig& m = c.model;
  if (tp > 1) {
    if (m.n_head % tp != 0)
      fail("parallel.tensor_parallel = {} does not divide model.n_head = {}: each tensor rank "
           "holds whole attention heads; choose a tensor_parallel that divides {}", tp, m.n_head,
           m.n_head);
    if (m.n_embd % tp != 0)
      fail("parallel.tensor_parallel = {} does not divide model.n_embd = {}: choose a "
           "tensor_parallel that divides the width", tp, m.n_embd);
    // (The vocabulary splits in padded slices: any tensor_parallel fits it.)
  }
  if (pp > m.n_layer)
    fail("parallel.pipeline_parallel = {} is more than model.n_layer = {}: every stage needs at "
         "least one layer; use at most {} stages", pp, m.n_layer, m.n_layer);
  if (c.batch_size % c.microbatches != 0)
    fail("parallel.microbatches = {} does not divide train.batch_size = {}: each micro-batch "
         "holds batch_size / microbatches rows", c.microbatches, c.batch_size);
  if (pp > 1 && c.pipeline_schedule == "1f1b" && c.microbatches < pp)
    fail("parallel.pipeline_schedule = \"1f1b\" needs parallel.microbatches >= "
         "parallel.pipeline_parallel (got {} < {}): raise microbatches to at least {} or use "
         "the gpipe schedule", c.microbatches, pp, pp);
  if (pp == 1 && c.microbatches > 1)
    fail("parallel.microbatches = {} splits the batch for a pipeline, but "
         "parallel.pipeline_parallel = 1: set parallel.pipeline_parallel > 1, or use "
         "train.grad_accum to accumulate micro-batches", c.microbatches);
  if (c.sequence_parallel) {
    if (tp == 1)
      fail("parallel.sequence_parallel = true splits the LayerNorm regions over the tensor "
           "ranks, but parallel.tensor_parallel = 1: raise tensor_parallel or turn "
           "sequence_parallel off");
    const int64_t rows = c.batch_size / c.microbatches * c.seq_len;
    if (rows % tp != 0)
      fail("parallel.sequence_parallel = true splits the {} tokens of a micro-batch "
           "(train.batch_size / parallel.microbatches x train.seq_len) over "
           "parallel.tensor_parallel = {} ranks, which does not divide them: change the batch "
           "or the sequence length", rows, tp);
  }
  if (c.zero_stage == 3 && pp > 1)
    fail("parallel.zero_stage = 3 gathers every layer's parameters for each micro-batch, which "
         "a pipeline would repeat per micro-batch: combine pipeline_parallel > 1 with "
         "parallel.zero_stage 0 or 2");
  if (c.device != "cpu") {
    if (pp > 1 && c.zero_stage > 1)
      fail("parallel.pipeline_parallel = {} on GPU ranks runs with ZeRO 0 or 1 in this version "
           "(the stage's data-parallel copies shard at most its optimizer state): set "
           "parallel.zero_stage = 1 (or 0), or parallel.pipeline_parallel = 1 to shard with "
           "ZeRO-{}", pp, c.zero_stage);
    if (pp > 1 && (c.grad_comm != "fp32" || c.grad_transport == "copy-engine"))
      fail("parallel.pipeline_parallel = {} on GPU ranks sums the stages' gradients in fp32 "
           "with the communicator's own collectives: set parallel.grad_comm = \"fp32\" and "
           "parallel.grad_transport = \"nccl\"",
           pp);
    // (ZeRO-2/3 shard each tensor rank's slices over its data-parallel group, whose
    // optimizer step runs on the GPU.)
    if (tp > 1 && c.offload_optimizer)
      fail("parallel.offload_optimizer = true does not run with parallel.tensor_parallel = {} "
           "on GPU ranks in this version: set parallel.offload_optimizer = false, or "
           "parallel.tensor_parallel = 1", tp);
  }
}

ParallelLayout parallel_layout(const TrainConfig& c, int world) {
  const int64_t model_ranks = c.tensor_parallel * c.pipeline_parallel;
  if (world % model_ranks != 0)
    fail("the job has {} rank(s), not a multiple of parallel.tensor_parallel x "
         "parallel.pipeline_parallel = {} x {} = {}: launch a multiple of {} ranks "
         "(data-parallel copies x {}), or change the layout", world, c.tensor_parallel,
         c.pipeline_parallel, model_ranks, model_ranks, model_ranks);
  ParallelLayout l;
  l.tp = static_cast<int>(c.tensor_parallel);
  l.pp = static_cast<int>(c.pipeline_parallel);
  l.dp = static_cast<int>(world / model_ranks);
  if (grad_mixing_of(c) == "adasum" && (l.dp & (l.dp - 1)) != 0)
    fail("parallel.grad_mixing = \"adasum\" combines ranks pairwise by recursive doubling, "
         "which needs a power-of-two number of data-parallel ranks, not {}: launch 2, 4, 8, ... "
         "ranks, or use parallel.grad_mixing = \"average\"", l.dp);
  // What one rank of this layout allocates, buffer by buffer (not the whole model).
  check_rank_buffers(c, l);
  return l;
}

parallel::GridOptions grid_options(const ParallelLayout& l) {
  parallel::GridOptions go;
  go.world = l.world();
  go.dp = l.dp;
  go.tp = l.tp;
  go.pp = l.pp;
  go.order = "tp-cp-dp-pp";  // tensor ranks consecutive: a tensor group inside a node
  return go;
}

std::string describe(const ParallelLayout& l) {
  return fmt::format("dp {} x tp {} x pp {}", l.dp, l.tp, l.pp);
}

}  // namespace aiscale::train
