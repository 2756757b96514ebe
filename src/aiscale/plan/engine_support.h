// What `aiscale train` runs today, in ONE table the planner consults for every layout it
// prices: which models, precisions, ZeRO stages, tensor/pipeline sizes, gradient
// transports and recomputation modes the engine trains, per device kind. When the engine
// grows (tensor/pipeline parallelism, ZeRO-2/3, CNN training), extend kEngineSupport in
// engine_support.cpp; tests/plan/engine_support_test.cpp checks the table against the
// train config's own validation, so the two cannot drift apart silently.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/plan/accelerator.h"
#include "aiscale/plan/layout.h"

namespace aiscale::plan {

struct EngineSupport {
  std::string_view device;                 // "cuda" (GPU partitions) or "cpu" (CPU partitions)
  std::vector<WorkloadKind> models;        // model families `aiscale train` trains there
  std::vector<Precision> precisions;       // train.precision values, as the planner names them
  std::vector<int> zero_stages;            // parallel.zero_stage values
  int max_tensor = 1;                      // largest tensor-parallel size (1: none)
  int max_pipeline = 1;                    // largest pipeline size (1: none)
  std::vector<GradTransport> transports;   // parallel.grad_transport values
  // The ZeRO stages the copy-engine transport runs with (empty: all of zero_stages).
  std::vector<int> copy_engine_zero_stages;
  std::vector<Recompute> recompute;        // the planner's recomputation modes it matches
  // Tensor parallelism with data-parallel copies only (dp x tp): no pipeline stages, and
  // with tp > 1 only these ZeRO stages (empty: any of zero_stages). GPU ranks: ZeRO 0 to 3
  // (ZeRO-1 shards the optimizer state over each data group, ZeRO-2/3 each tensor rank's
  // slices).
  bool tensor_no_pipeline = false;
  std::vector<int> tensor_zero_stages;
  // ZeRO-1 shards at multiples of the world size inside a residual projection's bias:
  // at most n_embd + 1 ranks (nn/models/gpt_common.cpp).
  bool zero1_ranks_at_most_width_plus_one = false;
  // Under tensor parallelism: the token embedding and the tied LM head split by vocabulary
  // rows (CPU and GPU ranks; nn/models/gpt_shard.h) or whole on every tensor rank, each
  // computing all the logits; sequence parallelism (CPU ranks) or the LayerNorms
  // and the residual stream whole on every rank (GPU ranks: their default; with
  // parallel.sequence_parallel the residual stream is split, which the planner does not
  // price, so the arena comes out below the plan). The planner counts memory and work
  // accordingly (plan/memory.h TensorSplit).
  bool vocab_parallel = true;
  bool sequence_parallel = true;
  // Pipeline stages: the ZeRO stages they run with (empty: any of zero_stages except 3),
  // whether they combine with tensor parallelism, and whether they recompute (GPU ranks,
  // nn/models/gpt_cuda_pp.cuh): each stage keeps one micro-batch's activations and the
  // inputs in flight, runs each micro-batch's forward again before its backward, and holds
  // the embeddings and the final norm beside its layers (summed over the stages after
  // backward); plan/memory.cpp and plan/perf.cpp price it.
  std::vector<int> pipeline_zero_stages;
  bool pipeline_with_tensor = true;
  bool pipeline_recomputes_stages = false;
  // The families of the GPT layout it builds models of (nn/models/gpt.h make_gpt: CPU
  // ranks build both; where the Llama family's model is not in this build yet, the
  // planner plans it the generic way, marked as layouts `aiscale train` cannot run).
  std::vector<nn::GptFamily> gpt_families = {nn::GptFamily::gpt2};
};

// The table, one row per device kind.
const std::vector<EngineSupport>& engine_support();
// The row for a partition (cpu_partition: "cpu", else "cuda").
const EngineSupport& engine_support_for(bool cpu_partition);

// Why `aiscale train` cannot run this workload with this layout and precision on this kind
// of partition today, or "" when it can. One short clause, e.g. "ZeRO-3 not implemented
// (aiscale trains ZeRO 0 and 1)".
std::string engine_gap(const Workload& w, const Layout& l, Precision p, bool cpu_partition);

// Whether a node's host memory holds what each of its ranks keeps there at a checkpoint:
// `aiscale train` builds the whole model's initial values on every rank and gathers whole
// parameter and AdamW-moment vectors for a checkpoint (12 bytes per parameter per rank: a
// conservative rule since checkpoints stream a range at a time, docs/guide/planner.md).
// "" when it fits or the node's memory is unknown (ram_gib 0), else why not.
std::string host_memory_gap(const Workload& w, const Layout& l, int gpus_per_node, double ram_gib);

// Why no layout of this workload can run at all (the model family or the precision), or "".
std::string engine_gap_for_workload(const Workload& w, Precision p, bool cpu_partition);

// Why aiscale cannot drive these devices at all, or "": aiscale's GPU code is CUDA, so a GPU
// partition whose GPUs are not NVIDIA's (AMD Instinct, Intel Max) is a what-if: planned only
// with --include-unsupported, marked, and refused by `slurm script`. CPU partitions run.
std::string device_gap(const Accelerator& a, bool cpu_partition);

// One line listing what the engine runs on this kind of partition, for the plan's notes.
std::string engine_support_summary(bool cpu_partition);

}  // namespace aiscale::plan
