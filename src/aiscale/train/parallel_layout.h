// The parallel layout of a training run: how many ranks split each layer (tensor
// parallelism), the layers (pipeline parallelism) and the batch (data parallelism, with
// ZeRO on that axis), checked against the model and the job before any memory is taken.
#pragma once
#include <string>

#include "aiscale/parallel/grid.h"
#include "aiscale/train/config.h"

namespace aiscale::train {

struct ParallelLayout {
  int dp = 1, tp = 1, pp = 1;
  int world() const { return dp * tp * pp; }
};

// What the config alone decides (no rank count): tensor_parallel divides the heads and the
// width (the vocabulary splits in padded slices); pipeline_parallel is at most the layers; micro-batches divide
// the batch and are enough for 1F1B; sequence parallelism has tensor ranks and tokens to
// split; ZeRO-2/3 only with options they work with; and which combinations this build
// runs. Throws Error naming the keys and the fix.
void check_parallel_config(const TrainConfig& c);

// The layout of a job of `world` ranks: dp = world / (tp x pp). Throws Error when tp x pp
// does not divide the rank count.
ParallelLayout parallel_layout(const TrainConfig& c, int world);

// The process grid of a layout, as training and the benchmarks place their ranks: the
// tensor ranks of one data-parallel copy consecutive, then the copies, then the pipeline
// stages (the grid's default order "tp-cp-dp-pp"): with dp 2 x tp 2, ranks 0 and 1 form a
// tensor group, 2 and 3 the other, and ranks {0, 2} and {1, 3} the data-parallel groups
// over which the copies sum their gradients. CPU and GPU ranks alike.
parallel::GridOptions grid_options(const ParallelLayout& l);

// "dp 2 x tp 2 x pp 1".
std::string describe(const ParallelLayout& l);

}  // namespace aiscale::train
