// Per-epoch figures: what an epoch costs beyond its steps, so that efficiency can be
// predicted per batch (the step alone), per training part (steps, the partial last batch
// and the data loading the steps do not hide) and per epoch (also start-up and validation):
//   training part = ⌈samples / batch⌉ steps (a partial last batch costs a whole step)
//                 + the first batch's loading (nothing runs beside it)
//                 + per step, loading beyond the step (a prefetching loader hides the rest)
//   epoch         = its share of the job's start-up (start-up / epochs of the run)
//                 + training part + validation batches (forward only, ≈ 1/3 of a step's
//                   compute, or their loading where that is longer)
// loading of a step = max(its bytes over the job's filesystem bandwidth, decoding its
// images on the cores beside each GPU); each figure names its source.
#pragma once
#include "aiscale/plan/calibration.h"
#include "aiscale/plan/layout.h"
#include "aiscale/plan/perf.h"

namespace aiscale::plan {

// What one epoch reads, resolved from the workload's DatasetShape and the request.
struct EpochInputs {
  double samples = 0;             // training samples per epoch
  double validation_samples = 0;  // per epoch
  double bytes_per_sample = 0;
  bool decoded = false;           // images decoded on the host's cores
  std::string source;             // where the dataset figures come from
};

struct EpochFigures {
  Figure storage_bytes_per_s;     // the job's read bandwidth from the shared filesystem
  Figure decode_per_core;         // images/s one host core decodes and augments
  Figure cores_per_gpu;           // host cores feeding each GPU's loader
};

// The filesystem bandwidth a job on `nodes` nodes of this partition reads at, the decoding
// rate and the cores per GPU: the catalogue, a measured `bench loader` result or
// `decode_override` (--decode-rate) where given, else Assumptions' stated defaults.
EpochFigures epoch_figures(const Partition& part, int nodes, double node_bytes_per_s,
                           const Calibration& cal, double decode_override, const Assumptions& a);

struct EpochEstimate {
  double samples = 0;             // training samples per epoch
  double steps = 0;               // ⌈samples / samples per step⌉
  double last_fraction = 1;       // of a full batch in the last step
  double train_steps_s = 0;       // steps × step time
  double last_batch_s = 0;        // what the partial last batch costs beyond its share
  double read_per_step_s = 0;     // one step's samples over the filesystem bandwidth
  double decode_per_step_s = 0;   // one GPU's images over its cores' decoding rate
  double load_per_step_s = 0;     // max of the two (they run pipelined)
  double first_batch_s = 0;       // the epoch's first batch loads before any step runs
  double load_exposed_s = 0;      // all steps' loading beyond their step, + first batch
  double validation_batches = 0;
  double validation_s = 0;
  double startup_s = 0;           // this epoch's share of the job's start-up
  double train_part_s = 0;        // train_steps_s + load_exposed_s
  double epoch_s = 0;             // startup_s + train_part_s + validation_s
  EpochFigures figures;
};

// `startup_s`: the epoch's share of the job's start-up (the planner: start-up / epochs).
EpochEstimate estimate_epoch(const EpochInputs& in, const StepEstimate& step, const Layout& l,
                             const EpochFigures& f, double startup_s);

}  // namespace aiscale::plan
