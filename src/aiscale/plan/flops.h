// How much arithmetic a training run needs, with the formula shown beside the result.
//   transformer: FLOP = 6·N·D + 12·L·d·T·D   (N parameters, D tokens, L layers, d width,
//                T context; the second term is attention's QKᵀ and AV products)
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
