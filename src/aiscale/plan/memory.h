// Memory per GPU for a workload under a layout: model states (weights, gradients,
// optimizer state, sharded by ZeRO over the data-parallel group and split by tensor and
// pipeline parallelism), activations (Korthikanti et al. 2022, with and without
// recomputation) and a stated workspace margin.
#pragma once
#include <string>

#include "aiscale/plan/accelerator.h"
#include "aiscale/plan/assumptions.h"
#include "aiscale/plan/layout.h"
#include "aiscale/plan/workload.h"

namespace aiscale::plan {

// Bytes per parameter of each model state before sharding.
struct StateBytes {
  double weights = 0, gradients = 0, optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};
// Mixed-precision AdamW: 2 + 4 + 12 (16-bit working weights; fp32 gradients, as aiscale,
// PyTorch AMP and Megatron's default keep them and as the planner reduces them; fp32 master
// weights, m, v) = 18. The ZeRO paper's formulas (zero_paper_bytes) count 2-byte gradients.
// FP32 AdamW: 4 + 4 + 8.
// SGD with momentum (CNNs; AMP keeps fp32 weights): 4 + 4 + 4.
StateBytes state_bytes(Optimizer opt, Precision p);

struct MemoryBreakdown {
  double params_on_gpu = 0;  // parameters the most loaded GPU holds before ZeRO sharding
  double weights = 0, gradients = 0, optimizer = 0;
  double activations = 0;
  // Gathered parameters, layer gradient buffers, pipeline stashes, ZeRO-1's flat copy.
  double buffers = 0;
  double workspace = 0;      // fixed + fragmentation margin (MemoryAssumptions)
  double offloaded = 0;      // optimizer state each rank keeps in host memory (offload)
  double total = 0;
  std::string stage;         // pipeline stage that needs the most: "first", "last" or "all"
  // What the training program allocates for the model (aiscale: its arena), without the
  // stated workspace margin: what a measured arena or peak is compared with.
  double allocated() const { return total - workspace; }
};

// Whose activations are counted: the generic formulation (Korthikanti et al.: dropout
// masks, fp32 logits for the loss; PyTorch/Megatron-style training) or aiscale's own
// engine on CPU or GPU ranks (no dropout, so no masks; logits in the activation precision
// over the vocabulary padded to a multiple of 128, their gradient written in place). The
// planner counts a layout `aiscale train` runs the aiscale way, any other the generic way.
enum class Accounting { generic, aiscale_cpu, aiscale_gpu };
bool is_aiscale(Accounting acc);
// The accounting of a layout: aiscale's on that kind of partition where `aiscale train`
// runs it, else the generic one.
Accounting accounting_for(bool runs, bool cpu_partition);

// How tensor parallelism splits a layer and the vocabulary: Megatron's way (the generic
// accounting and aiscale's CPU ranks: a vocabulary-parallel embedding and LM head, sequence
// parallelism) or aiscale's GPU ranks' (engine_support.h: the token embedding with the tied
// LM head and the LayerNorm/residual activations whole on every tensor rank).
struct TensorSplit {
  bool vocab_parallel = true;
  bool sequence_parallel = true;
};
TensorSplit tensor_split(Accounting acc);

// With Layout::offload the optimizer state (its shard under ZeRO) moves from `optimizer` to
// `offloaded`, in host memory: 6 instead of 18 bytes per parameter stay on the GPU before
// sharding, in mixed precision.
MemoryBreakdown memory_per_gpu(const Workload& w, const Layout& l, Precision p,
                               const MemoryAssumptions& a = {},
                               Accounting acc = Accounting::generic);

// Parameters held by one GPU of the first (or last) pipeline stage with tensor size tp:
// layer matrices and their split biases divided by tp, norms and output-projection
// biases replicated, the token embedding vocabulary-parallel (or whole on every tensor
// rank); the last stage holds the output layer: a copy of the tied embedding, or an untied
// LM head (split like the embedding). Equals num_params() for tp = pp = 1.
double params_per_gpu(const Workload& w, int tp, int pp, bool last_stage = false,
                      bool vocab_parallel = true);
// Parameters of one transformer layer on one of tp tensor ranks (GPT-2: (12C² + 7C)/tp +
// 6C; Llama: (C·(C + 2·kv_rows) + C² + 3·F·C)/tp + 2C, no biases).
double layer_params_per_gpu(const Workload& w, int tp);
// The learned position embedding (GPT-2: block_size·C; rotary positions: none), the final
// norm (LayerNorm 2C, RMSNorm C), and an untied LM head's V·C on one tensor rank (split by
// vocabulary rows where vocab_parallel; tied: 0, the token embedding serves).
double position_params(const Workload& w);
double final_norm_params(const Workload& w);
double untied_head_params_per_gpu(const Workload& w, int tp, bool vocab_parallel);

// The ZeRO paper's (Rajbhandari et al. 2020) model-state bytes per device for psi
// parameters, K optimizer bytes per parameter, nd data-parallel devices:
//   stage 0: (2+2+K)Ψ   stage 1: 4Ψ + KΨ/Nd   stage 2: 2Ψ + (2+K)Ψ/Nd   stage 3: (2+2+K)Ψ/Nd
double zero_paper_bytes(double psi, int stage, int nd, double k = 12.0);

// Korthikanti et al. 2022, bytes of activations one transformer layer keeps for backward
// (1-byte dropout masks; other elements of `element_bytes`, 2 for 16-bit training),
// sequence length s, micro-batch b, width h, heads a, tensor size t with sequence
// parallelism. With 16-bit elements:
//   materialized attention:  none: s·b·h·(34 + 5·a·s/h)/t   selective: 34·s·b·h/t
//   flash attention:         none and selective: 34·s·b·h/t + 4·a·s·b/t
//   either:                  full: 2·s·b·h/t
// Without sequence parallelism the 10·s·b·h of the LayerNorms, the two inputs of the
// column-parallel layers and the dropout masks stay whole on every tensor rank: 34 becomes
// 10 + 24/t (Korthikanti et al., table 2).
// 5·a·s²·b is the stored attention scores (softmax output, its dropout mask and dropout
// output), which a flash kernel never writes; it keeps one fp32 log-sum-exp per head and
// row (4·a·s·b) instead, whatever the element size.
double transformer_layer_activation_bytes(double s, double b, double h, double a, int t,
                                          Recompute r, Attention att = Attention::materialized,
                                          double element_bytes = 2.0, bool sequence_parallel = true);

// Bytes of activations one Llama-family layer keeps for backward, counted as Korthikanti et
// al. count a GPT layer (memory.cpp derives it tensor by tensor): sequence length s,
// micro-batch b, width h, heads a, key/value width kv = kv_heads·head_size, MLP width f,
// tensor size t. The block has no dropout, so no masks. With 16-bit elements and sequence
// parallelism:
//   none:      (12·h + 4·kv + 6·f)·s·b/t  + materialized: 2·a·s²·b/t   flash: 4·a·s·b/t
//   selective: (12·h + 4·kv + 6·f)·s·b/t  (+ flash's 4·a·s·b/t)
//   full:      2·s·b·h/t
// Without sequence parallelism the norms' inputs and outputs (8·s·b·h) stay whole on
// every tensor rank. (Llama 3 8B: 12·4096 + 4·1024 + 6·14336 = 34·4096, GPT-2's 34·h.)
double llama_layer_activation_bytes(double s, double b, double h, double a, double kv, double f,
                                    int t, Recompute r, Attention att = Attention::flash,
                                    double element_bytes = 2.0, bool sequence_parallel = true);

}  // namespace aiscale::plan
