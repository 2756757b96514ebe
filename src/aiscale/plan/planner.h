// The planner: for each system partition, search the layouts (data × tensor × pipeline
// sizes, ZeRO stage, micro-batch, recomputation) that fit in memory at each GPU count,
// keep the fastest, and rank systems by time to train; plus predicted scaling curves.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aiscale/plan/access.h"
#include "aiscale/plan/calibration.h"
#include "aiscale/plan/engine_support.h"
#include "aiscale/plan/epoch.h"
#include "aiscale/plan/flops.h"
#include "aiscale/plan/memory.h"
#include "aiscale/plan/perf.h"

namespace aiscale::plan {

// Parts of the layout the user fixes (--dp/--tp/--pp/--zero/--micro-batch/--recompute).
struct LayoutPins {
  std::optional<int> tp, pp, zero, micro_batch;
  std::optional<Recompute> recompute;
  bool offload = false;  // --offload-optimizer: only layouts with the optimizer offloaded
};

// What the user optimises (--rank): the shortest time to finish (the most GPUs the job
// uses at --min-efficiency), the fewest GPU-hours, or the smallest allocation that
// finishes within --deadline.
enum class Objective { time, gpu_hours, energy, cost, smallest };
// "time" (also "days"), "gpu-hours", "energy", "cost", "smallest"
Objective parse_objective(std::string_view text);
std::string_view to_string(Objective o);

struct PlanRequest {
  Workload workload;
  double tokens = 0;             // transformers: D
  double images = 0;             // CNNs: samples per epoch
  double epochs = 1;             // CNNs
  // The epoch (epoch.h); unset: the workload's DatasetShape. samples_per_epoch for a
  // transformer makes --tokens span several epochs; validation as samples or a fraction
  // of the training samples; decode_per_core: images/s one host core decodes.
  std::optional<double> samples_per_epoch, validation_samples, validation_fraction,
      bytes_per_sample, decode_per_core;
  Precision precision = Precision::bf16;
  long gpus = 0;                 // 0: search GPU counts
  long global_batch = 0;         // sequences/images per step; 0: workload default (CNN: weak)
  // Never more GPUs than the job uses at this efficiency, relative to the fewest GPUs the
  // model fits on (time to finish, start-up included).
  double min_efficiency = 0.7;
  // A run already this short on n GPUs is not spread over more (a 2 GPU-hour job stays on
  // one node); a --deadline shorter than it wins.
  double min_duration_s = 3600;
  std::optional<double> deadline_s;  // --deadline: the run must finish within this
  long max_gpus = 0;             // 0: the partition's size
  LayoutPins pins;
  // Attention kernel (transformers). nullopt: flash on GPU partitions (aiscale's CUDA
  // backend, PyTorch SDPA), materialized on CPU partitions (aiscale's CPU backend).
  std::optional<Attention> attention;
  // How the data-parallel gradients travel: NCCL (any GPU count) or aiscale's copy engines
  // (GPU partitions, one node, ZeRO 0 or 1; larger counts are rejected with the reason).
  // nullopt: "auto", as `aiscale train` resolves it: the copy engines for plain data
  // parallelism with ZeRO 0 or 1 on the Hopper GPUs of one node, NCCL for every other
  // layout (transport_for).
  std::optional<GradTransport> grad_transport;
  Objective objective = Objective::time;
  // --price: what one GPU-hour costs (the planner's GPU-hours: ranks x hours on CPU
  // partitions), by partition id ("leonardo/booster") or system id ("leonardo"); the
  // partition's own entry first. A candidate of a partition without one has no cost.
  std::map<std::string, double> prices;
  Applicant applicant = Applicant::experienced;  // --applicant: who applies for the access call
  // Also plan (and mark) layouts `aiscale train` cannot run today (engine_support.h).
  bool include_unsupported = false;
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
  long base_gpus = 0;     // the smallest GPU count that fits: the reference of `scaling`
  long base_allocated_gpus = 0;  // the GPUs that base allocates (allocated_gpus())
  // Scaling efficiency against base_gpus (strong: fixed global batch; weak: CNN, fixed
  // batch per GPU), over the whole run's time including start-up, per GPU ALLOCATED (this
  // run's allocated_gpus() against the base's): what --min-efficiency bounds, so a plan
  // that leaves part of each node idle pays for it here as in its GPU-hours.
  double scaling = 1;
  // The same per GPU USED (the layout's ranks): the layout's own scaling. Equal to
  // `scaling` where both placements give every GPU of their nodes a rank.
  double scaling_used = 1;
  // Efficiency against ONE baseline for every row: one GPU of the same kind running the
  // whole global batch at its best micro-batch, with no communication and no memory limit
  // (ideal_step_s), over this run's step × the GPUs allocated: ≤ 1 unless ZeRO's sharded
  // optimizer update saves more than the communication costs (efficiency_note says so).
  double efficiency = 1;
  double efficiency_used = 1;  // the same over the step × the GPUs used
  double ideal_step_s = 0;
  std::string efficiency_note;
  bool weak = false;
  double steps = 0, days = 0, gpu_hours = 0;
  // The GPUs' energy over the run, kWh: the GPUs the ranks use at their datasheet board
  // power (an upper bound), the allocated GPUs without a rank (the rest of the nodes where
  // fewer ranks per node are placed) at Assumptions::idle_power_fraction of it; hosts,
  // network and cooling not counted; 0 where the catalogue has no power.
  double energy_kwh = 0;
  // GPU-hours x the partition's --price; < 0 where no price was given for it.
  double cost = -1;
  double startup_s = 0;   // job start-up (Assumptions::startup_*), in days and gpu_hours
  double epochs = 1;      // epochs the run makes (transformers: --tokens over the epoch)
  EpochEstimate epoch;    // one epoch: loading, validation, partial batch, start-up
  // Efficiency against base_gpus of the samples trained per second per GPU allocated (as
  // `scaling`): per batch (the step only), per training part (steps, partial batch,
  // exposed loading) and per epoch (start-up and validation too).
  double eff_batch = 1, eff_train = 1, eff_epoch = 1;
  AccessRoute route;
  // Why `aiscale train` cannot run this layout today ("" when it can; engine_support.h).
  std::string engine_gap;
  bool runs() const { return engine_gap.empty(); }
  // Ranks on each node: all of its GPUs (or the layout's GPUs, within one node), fewer
  // where the node's host memory holds fewer ranks (Layout::ranks_per_node).
  int ranks_per_node() const;
  // The GPUs the job allocates: the layout's, or whole nodes where it places fewer ranks
  // per node than the node has GPUs (what GPU-hours, cost, energy and the efficiencies
  // count).
  long allocated_gpus() const;
};

struct Rejection {
  Target target;
  std::string reason;
};

struct PlanResult {
  ComputeEstimate compute;
  // Best first: one per partition that `aiscale train` can run; with include_unsupported
  // also each partition's best layout the engine cannot run yet, where it differs.
  std::vector<Candidate> ranked;
  std::vector<Rejection> rejected;  // partitions where nothing fits, and why
};

struct Search {
  std::optional<Candidate> best;
  std::string reason;  // why nothing fits (when best is empty)
  // The tensor-parallel sizes the model's shape rules out (a divisor of the attention heads
  // that does not divide the key/value heads or the MLP width), each with its reason.
  std::vector<std::string> skipped;
};

// The fastest layout that fits `gpus` GPUs of one partition (efficiency not yet set);
// only layouts `aiscale train` runs unless `unsupported_too`.
Search best_layout(const PlanRequest& r, const Target& t, long gpus, const MachineFigures& m,
                   const Assumptions& a, bool unsupported_too = false);

// Why `gpus` GPUs of this partition cannot use the request's gradient transport, or "".
std::string transport_reason(const PlanRequest& r, const Partition& part, long gpus);
// The transport of layout `l` on `gpus` GPUs of `part`: the request's, or where it asks
// for none ("auto") the one `aiscale train` takes: the copy engines for plain data
// parallelism with ZeRO 0 or 1 on the Hopper GPUs of one node, else NCCL.
GradTransport transport_for(const PlanRequest& r, const Partition& part, const Layout& l,
                            long gpus);

// The host-memory rule of a GPU layout that `aiscale train` runs: each rank keeps whole
// model vectors in its node's host memory (host_memory_gap). Where a rank on each of a
// node's GPUs fits, `l` keeps one per GPU (ranks_per_node 0) and "" is returned; where
// fewer ranks per node fit on more nodes (a divisor of the node's GPUs, largest first, at
// most the partition's nodes, the tensor-parallel group inside a node), `l` gets that
// ranks_per_node and NCCL, and "" is returned; else why not (`l` placed one per GPU).
std::string place_in_host_memory(const PlanRequest& r, const Partition& part, const Workload& w,
                                 Layout& l);

// Why a partition cannot be planned at all (a CPU partition without its CPU model,
// sockets or RAM, an IPU partition), or "" when it can.
std::string unplannable_reason(const Partition& part);

// Prices a searched candidate's run: its epoch (epoch.h), epochs, time to finish, GPU-hours
// and access route.
void finish_candidate(Candidate& c, const PlanRequest& r, const Assumptions& a, const Catalog& cat,
                      const Calibration& cal);
// c's scaling against `base` per GPU used (scaling_used) and per GPU allocated (scaling):
// weak, samples per second per GPU; strong, base_time × n0 / (time × n) of the times given
// (the whole run's, or one step's); sets base_gpus, base_allocated_gpus and weak.
void scale_against(Candidate& c, const Candidate& base, bool weak, double base_time, double time);
// Its efficiencies per batch, training part and epoch against `base` (samples per second
// per GPU allocated; Candidate::eff_*).
void epoch_efficiencies(Candidate& c, const Candidate& base);

// The epoch the request describes for this workload (EpochInputs from the DatasetShape and
// the request's overrides).
EpochInputs epoch_inputs(const PlanRequest& r);

// Validates the request (amounts, pins against the model) and throws Error for mistakes.
void check_request(const PlanRequest& r);

PlanResult plan(const PlanRequest& r, const std::vector<Target>& targets, const Catalog& cat,
                const Calibration& cal, const Assumptions& a);

struct ScalingRow {
  // The nodes the run uses (more than gpus / GPUs per node where the node's host memory
  // holds fewer ranks than it has GPUs: run->layout.ranks_per_node) and its GPUs (ranks);
  // without a run, the row's GPUs on whole nodes.
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

// The GPUs of 1, 2, 4, ... whole nodes up to max_nodes (and the partition's size), each
// placed by the plan's rule (best_layout, place_in_host_memory); a row whose ranks would
// need more than max_nodes nodes at the ranks per node that fit is left without a run.
ScalingCurve scaling_curve(const PlanRequest& r, const Target& t, long max_nodes,
                           const Catalog& cat, const Calibration& cal, const Assumptions& a);

}  // namespace aiscale::plan
