// A parallel layout: how a training step is spread over GPUs.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "aiscale/plan/workload.h"

namespace aiscale::plan {

// Activation recomputation (Korthikanti et al. 2022): none, selective (attention's
// softmax/dropout recomputed), full (every layer's forward recomputed in backward).
enum class Recompute { none, selective, full };
Recompute parse_recompute(std::string_view text);
std::string_view to_string(Recompute r);

// How the data-parallel gradients travel inside a node: NCCL's kernels (any framework;
// aiscale's default) or aiscale's copy-engine transport (parallel.grad_transport =
// "copy-engine": DMA copies over CUDA IPC, GPU ranks of one node, ZeRO 0 or 1).
enum class GradTransport { nccl, copy_engine };
GradTransport parse_grad_transport(std::string_view text);
std::string_view to_string(GradTransport t);

struct Layout {
  int dp = 1;           // data-parallel model copies
  int tp = 1;           // tensor-parallel ranks (Megatron, with sequence parallelism)
  int pp = 1;           // pipeline stages (1F1B schedule)
  int zero = 0;         // ZeRO stage over the data-parallel group: 0 (DDP), 1, 2, 3
  int micro_batch = 1;  // sequences (or images) per GPU per forward pass
  int grad_accum = 1;   // micro-batches per optimizer step (per pipeline: its micro-batch count)
  Recompute recompute = Recompute::none;
  GradTransport transport = GradTransport::nccl;
  // The optimizer state (fp32 master weights, AdamW moments) in host memory and AdamW on
  // the CPU (ZeRO-Offload; aiscale's parallel.offload_optimizer): planned when pinned.
  bool offload = false;
  // Ranks placed on each node; 0: one per GPU of the node. The planner lowers it (a divisor
  // of the node's GPUs, on more nodes) where the node's host memory holds fewer ranks.
  int ranks_per_node = 0;

  long gpus() const { return static_cast<long>(dp) * tp * pp; }
  long global_batch() const { return static_cast<long>(dp) * micro_batch * grad_accum; }
  std::string shape() const;     // "64×1×1"  (dp×tp×pp)
  // "dp 64 × tp 1 × pp 1, ZeRO-1, micro-batch 8 × accum 1, recompute none" (", copy
  // engines" with that transport, ", optimizer offloaded" with offload)
  std::string describe() const;
};

// Why this layout cannot run this workload, or nullopt when it can.
std::optional<std::string> layout_problem(const Layout& l, const Workload& w);
// Throws Error with that reason.
void validate_layout(const Layout& l, const Workload& w);

}  // namespace aiscale::plan
