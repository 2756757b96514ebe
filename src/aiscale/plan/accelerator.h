// Accelerators as the planner sees them: datasheet peaks per precision, memory and
// memory bandwidth (data/systems/accelerators.toml), and the training precisions.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aiscale::plan {

// Arithmetic precision of a training run's matrix multiplies. fp32: plain FP32;
// tf32: FP32 storage with TF32 tensor-core matmuls; bf16/fp16: mixed precision with FP32
// master weights; fp8: FP8 matmuls with BF16 storage (Transformer-Engine style).
enum class Precision { fp32, tf32, fp16, bf16, fp8 };

// "fp32", "tf32", "fp16", "bf16", "fp8" (also "amp" = bf16). Throws Error naming the input.
Precision parse_precision(std::string_view text);
std::string_view to_string(Precision p);
// True for the mixed-precision modes that keep 16-bit weights beside FP32 master weights.
bool is_mixed(Precision p);
// Bytes of one stored activation element in this precision (16-bit for the mixed modes).
double activation_bytes(Precision p);

struct Accelerator {
  std::string id;      // "A100-SXM4-40GB"
  std::string vendor;  // "NVIDIA"
  std::string name;    // human-readable
  double memory_gib = 0;
  double memory_bandwidth_tbs = 0;  // 0: unknown (see bandwidth_as)
  std::string bandwidth_as;         // id whose bandwidth stands in when this one is unknown
  // Dense peaks in TFLOP/s; 0 means the precision is not supported.
  double peak_fp64 = 0, peak_fp32 = 0, peak_tf32 = 0, peak_fp16 = 0, peak_bf16 = 0, peak_fp8 = 0;
  // The board's maximum power (TDP) from the datasheet, W; 0: not in the catalogue. An
  // upper bound of what the GPU draws while it trains (`--rank energy`).
  double board_power_w = 0;
  std::vector<std::string> device_names;  // driver-reported name fragments (calibration)
  std::string source;                     // where the figures come from
  // A whole CPU node standing in as one "device" (CPU partitions): peaks are the node's
  // cores × clock × FLOPs per cycle, memory is the node's RAM, bandwidth its DRAM's.
  bool cpu_node = false;

  double memory_bytes() const { return memory_gib * 1024.0 * 1024.0 * 1024.0; }
  // Dense peak in FLOP/s for a precision; 0 when unsupported.
  double peak_flops(Precision p) const;
  // What to tell the user when a precision is unsupported, e.g. "V100 has no BF16 ...".
  std::string unsupported_reason(Precision p) const;
};

}  // namespace aiscale::plan
