// Pipeline schedules as explicit tables: for each stage, the order in which it runs the
// forward and backward passes of the micro-batches. Pure (no communication), so that a
// schedule is checked on its own: every micro-batch passes forward then backward once per
// stage, the stages' orders are free of deadlock over blocking point-to-point sends, and
// the idle time (the bubble) is what the schedule promises.
//
// GPipe: all forwards, then all backwards (every micro-batch's activations held at once).
// 1F1B (PipeDream-flush, Megatron's default): stage s runs pp - s - 1 forwards to fill the
// pipeline, then alternates one forward and one backward, then drains the backwards; a
// stage holds at most pp - s micro-batches' activations. Both have the same bubble,
// (pp - 1) / (microbatches + pp - 1) of the time with equal stage times.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::parallel::pipeline {

// The layers stage `stage` of `stages` holds, [begin, end): split as evenly as they go,
// stage s holding [L s / stages, L (s + 1) / stages) (every stage at least one layer when
// stages <= n_layer). The first stage also holds the embeddings, the last the final
// LayerNorm and the LM head. Shared by the CPU and the GPU models.
struct StageLayers {
  int64_t begin = 0, end = 0;
};
StageLayers stage_layers(int64_t n_layer, int stages, int stage);

enum class PassKind { forward, backward };

struct Pass {
  PassKind kind;
  int microbatch;
  bool operator==(const Pass&) const = default;
};

using StageSchedule = std::vector<Pass>;

StageSchedule gpipe_schedule(int stages, int stage, int microbatches);
StageSchedule one_f_one_b_schedule(int stages, int stage, int microbatches);
// By name: "gpipe" or "1f1b".
StageSchedule schedule_by_name(const std::string& name, int stages, int stage, int microbatches);

// The most micro-batches whose activations a stage holds at once (forward run, backward
// not yet).
int max_in_flight(const StageSchedule& s);

// Runs every stage's table with passes of the given durations, where a forward of
// micro-batch m on stage s waits for stage s - 1's forward of m and a backward for stage
// s + 1's backward of m, each stage in its table's order. `recompute` > 0: before a
// backward the stage first runs the micro-batch's forward again (from its stashed input,
// as the GPU stages of nn/models/gpt_cuda_pp.cuh do), unless its last pass was that
// micro-batch's forward; the recomputation does not wait for the downstream gradient.
struct PipelineRun {
  double makespan = 0;        // when the last pass ends
  std::vector<double> busy;   // each stage's time computing
  bool deadlock = false;      // the tables wait for each other
};
PipelineRun simulate_pipeline(const std::vector<StageSchedule>& stages, double forward,
                              double backward, double recompute = 0.0);
// The fraction of the stages' time spent idle before the last pass ends (the bubble), with
// unit-time forwards and backwards of `backward_cost`; negative when the tables deadlock.
double simulated_bubble(const std::vector<StageSchedule>& stages, double backward_cost = 2.0);

}  // namespace aiscale::parallel::pipeline
