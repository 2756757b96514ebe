// The planner: for each system partition, search the layouts (data × tensor × pipeline
// sizes, ZeRO stage, micro-batch, recomputation) that fit in memory at each GPU count,
// keep the fastest, and rank systems by time to train; plus predicted scaling curves.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "aiscale/plan/access.h"
#include "aiscale/plan/calibration.h"
#include "aiscale/plan/flops.h"
#include "aiscale/plan/memory.h"
#include "aiscale/plan/perf.h"

namespace aiscale::plan {

// Parts of the layout the user fixes (--dp/--tp/--pp/--zero/--micro-batch/--recompute).
struct LayoutPins {
  std::optional<int> tp, pp, zero, micro_batch;
  std::optional<Recompute> recompute;
};

struct PlanRequest {
  Workload workload;
  double tokens = 0;             // transformers: D
  double images = 0;             // CNNs: samples per epoch
  double epochs = 1;             // CNNs
  Precision precision = Precision::bf16;
  long gpus = 0;                 // 0: search GPU counts
  long global_batch = 0;         // sequences/images per step; 0: workload default (CNN: weak)
  double min_efficiency = 0.8;   // largest GPU count whose efficiency stays at or above this
  long max_gpus = 0;             // 0: the partition's size
  LayoutPins pins;
  // Attention kernel (transformers). nullopt: flash on GPU partitions (aiscale's CUDA
  // backend, PyTorch SDPA), materialized on CPU partitions (aiscale's CPU backend).
  std::optional<Attention> attention;
  // How the data-parallel gradients travel: NCCL (any GPU count) or aiscale's copy engines
  // (GPU partitions, one node, ZeRO 0 or 1; larger counts are rejected with the reason).
  GradTransport grad_transport = GradTransport::nccl;
  bool rank_by_gpu_hours = false;
};

// The attention this request assumes on a partition, and the workload with it set.
Attention attention_on(const PlanRequest& r, const Partition& part);
Workload workload_on(const PlanRequest& r, const Partition& part);

struct Candidate {
  Target target;
  Layout layout;
  MemoryBreakdown memory;
  StepEstimate step;
  MachineFigures figures;
  Attention attention = Attention::flash;  // what the activation memory assumed
  long base_gpus = 0;     // the smallest GPU count that fits: the efficiency reference
  double efficiency = 1;  // strong (fixed global batch) or weak (CNN, fixed batch per GPU)
  bool weak = false;
  double steps = 0, days = 0, gpu_hours = 0;
  AccessRoute route;
};

struct Rejection {
  Target target;
  std::string reason;
};

struct PlanResult {
  ComputeEstimate compute;
  std::vector<Candidate> ranked;    // one per partition, best first
  std::vector<Rejection> rejected;  // partitions where nothing fits, and why
};

struct Search {
  std::optional<Candidate> best;
  std::string reason;  // why nothing fits (when best is empty)
};

// The fastest layout that fits `gpus` GPUs of one partition (efficiency not yet set).
Search best_layout(const PlanRequest& r, const Target& t, long gpus, const MachineFigures& m,
                   const Assumptions& a);

// Why `gpus` GPUs of this partition cannot use the request's gradient transport, or "".
std::string transport_reason(const PlanRequest& r, const Partition& part, long gpus);

// Why a partition cannot be planned at all (a CPU partition without its CPU model,
// sockets or RAM, an IPU partition), or "" when it can.
std::string unplannable_reason(const Partition& part);

// Validates the request (amounts, pins against the model) and throws Error for mistakes.
void check_request(const PlanRequest& r);

PlanResult plan(const PlanRequest& r, const std::vector<Target>& targets, const Catalog& cat,
                const Calibration& cal, const Assumptions& a);

struct ScalingRow {
  long nodes = 0, gpus = 0;
  std::optional<Candidate> run;
  double speedup = 0, efficiency = 0;
  std::string note;  // why there is no run at this size
};

struct ScalingCurve {
  Target target;
  MachineFigures figures;
  long global_batch = 0;          // strong scaling's fixed batch (sequences or images)
  Layout base;                    // layout at the smallest size; tp, pp, ZeRO, recompute kept
  std::vector<ScalingRow> strong, weak;
};

// Node counts 1, 2, 4, ... up to max_nodes (and the partition's size).
ScalingCurve scaling_curve(const PlanRequest& r, const Target& t, long max_nodes,
                           const Catalog& cat, const Calibration& cal, const Assumptions& a);

}  // namespace aiscale::plan
