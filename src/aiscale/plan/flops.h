// How much arithmetic a training run needs, with the formula shown beside the result.
//   transformer: FLOP = 6·N·D + 12·L·d·T·D   (N parameters, D tokens, L layers, d width,
//                T context; the second term is attention's QKᵀ and AV products), the
//                engine's gpt_train_flops_per_token for both families (Llama: N without an
//                untied input embedding, a lookup)
//   CNN:         FLOP = MACs × 2 × 3 × samples × epochs
#pragma once
#include <string>

#include "aiscale/plan/workload.h"

namespace aiscale::plan {

struct ComputeEstimate {
  double flops = 0;              // total training FLOP (model FLOPs, no recomputation)
  double flops_per_sample = 0;   // per token (transformer) or per image (CNN), forward+backward
  double samples = 0;            // tokens (transformer) or images × epochs (CNN) processed
  std::string formula;           // symbolic, e.g. "6·N·D + 12·L·d·T·D"
  std::string substituted;       // the same with the numbers and the result
};

// One token's forward FLOPs by operation (multiply-adds × 2), for the step-time model's
// parts (the LM head's share, attention's, a layer's). Backward is twice each; the
// parameter term 6·N also counts each norm weight and bias 6 times, which no matmul does:
// 3·(layers·layer() + head) + 6·(norm and bias parameters) = gpt_train_flops_per_token.
struct TransformerOpFlops {
  double qkv = 0;        // 2·d·(d + 2·kv): Q and, with grouped-query attention, smaller K, V
  double attention = 0;  // 4·T·d: QKᵀ and AV over the whole context (PaLM's count)
  double out = 0;        // 2·d²: the attention output projection
  double mlp = 0;        // GPT-2: 2·d·4d twice; Llama: 2·d·F for gate, up and down (SwiGLU)
  double head = 0;       // 2·V·d: the LM head (tied or not)
  double layer() const { return qkv + attention + out + mlp; }
};
TransformerOpFlops transformer_op_flops(const nn::GptConfig& g, int64_t seq_len);

// The widths of a transformer block's linear layers: the width d (the QKV, projection and
// up layers read it, the projection writes it), the fused QKV output, the up output (GPT-2's
// fc, or Llama's gate and up together) and the down projection's input f (its output is d).
struct LinearWidths {
  double d = 0, qkv = 0, up = 0, f = 0;
};
LinearWidths linear_widths(const nn::GptConfig& g);

// tokens: D for transformers. images, epochs: for CNNs. Throws Error for a non-positive amount.
ComputeEstimate transformer_training_flops(const Workload& w, double tokens);
ComputeEstimate cnn_training_flops(double macs_per_sample, double images, double epochs);
ComputeEstimate training_flops(const Workload& w, double tokens, double images, double epochs);

// Ideal GPU-hours for `flops` at `peak_flops` per GPU and a utilisation (0..1), with the
// formula: "GPU-hours = FLOP / (peak × utilisation) / 3600 = ...".
struct GpuHours {
  double hours = 0;
  std::string substituted;
};
GpuHours ideal_gpu_hours(double flops, double peak_flops, double utilisation);

}  // namespace aiscale::plan
