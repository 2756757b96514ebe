// Step-time model:
//   step = accumulation × (compute + tensor-parallel comm per micro-batch)
//        + pipeline bubble (pp-1 micro-batch slots) + pipeline sends
//        + exposed data-parallel comm (what the compute beside it cannot hide, and what each
//          collective beside it costs the compute) + optimizer update
//        + stragglers (the slowest of n ranks' compute: spread × E[max of n normals])
// compute = hardware FLOPs / (dense peak × utilisation); communication from the
// alpha-beta costs in collectives.h over the partition's links and topology.
#pragma once
#include <string>

#include "aiscale/plan/calibration.h"
#include "aiscale/plan/layout.h"
#include "aiscale/plan/memory.h"

namespace aiscale::plan {

struct StepEstimate {
  int nodes = 1;
  int gpus_per_node_used = 1;
  double compute_s = 0;        // all micro-batches, this GPU
  double tp_comm_s = 0;        // tensor-parallel all-reduces, all micro-batches
  double bubble_s = 0;         // pipeline fill and drain
  double pp_comm_s = 0;        // pipeline activation/gradient sends
  double dp_comm_s = 0;        // data-parallel collectives, total
  double dp_exposed_s = 0;     // the part not hidden behind backward/forward (≤ dp_comm_s)
  // What running collectives beside compute costs on its own, apart from their traffic:
  // each one's kernels wait for SMs and peers (Assumptions::collective_overlap_cost_s).
  double overlap_cost_s = 0;
  double optimizer_s = 0;      // memory-bound optimizer update
  double sync_s = 0;           // fixed per-step data-parallel synchronisation (GPU, NCCL)
  double straggler_s = 0;      // waiting for the slowest of the ranks (step spread, perf.cpp)
  double step_s = 0;
  double samples_per_step = 0; // sequences or images
  double tokens_per_step = 0;  // transformers
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double model_flops_per_step = 0;
  double mfu = 0;              // model FLOPs / (step × GPUs × peak)
  double utilisation = 0;      // of the peak, at this layout's per-GPU GEMM size
  double topology_factor = 1;
};

// E[max of n independent standard normal variables]: 0 for n = 1, 0.564 for 2, 1.03 for 4,
// 3.04 for 512 (numerical integration of n·x·φ(x)·Φ(x)^(n−1)).
double expected_max_normal(long n);

// Requires layout.gpus() to fit the partition: ≤ gpus_per_node, or a multiple of it
// (checked by the planner; throws Error otherwise). `acc`: whose engine runs the layout,
// which decides how tensor parallelism splits the vocabulary (memory.h TensorSplit).
StepEstimate estimate_step(const Workload& w, const Layout& l, const Partition& part,
                           const MachineFigures& m, Precision p, const Assumptions& a,
                           Accounting acc = Accounting::generic);

}  // namespace aiscale::plan
