#include "aiscale/plan/accelerator.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "aiscale/core/ascii.h"
#include "aiscale/core/error.h"

namespace aiscale::plan {

Precision parse_precision(std::string_view text) {
  const std::string t = ascii_lower(text);
  if (t == "fp32" || t == "float32") return Precision::fp32;
  if (t == "tf32") return Precision::tf32;
  if (t == "fp16" || t == "float16") return Precision::fp16;
  if (t == "bf16" || t == "bfloat16" || t == "amp") return Precision::bf16;
  if (t == "fp8") return Precision::fp8;
  fail("unknown precision '{}': use one of fp32, tf32, bf16, fp16, fp8", text);
}

std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

bool is_mixed(Precision p) {
  return p == Precision::fp16 || p == Precision::bf16 || p == Precision::fp8;
}

double activation_bytes(Precision p) { return is_mixed(p) ? 2.0 : 4.0; }

double Accelerator::peak_flops(Precision p) const {
  double tflops = 0;
  switch (p) {
    case Precision::fp32: tflops = peak_fp32; break;
    case Precision::tf32: tflops = peak_tf32; break;
    case Precision::fp16: tflops = peak_fp16; break;
    case Precision::bf16: tflops = peak_bf16; break;
    case Precision::fp8: tflops = peak_fp8; break;
  }
  return tflops * 1e12;
}

std::string Accelerator::unsupported_reason(Precision p) const {
  std::vector<std::string> have;
  for (Precision q : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16,
                      Precision::fp8})
    if (peak_flops(q) > 0) have.emplace_back(to_string(q));
  std::string list;
  for (const auto& h : have) list += (list.empty() ? "" : ", ") + h;
  return fmt::format("{} has no {} peak in the catalogue (supported: {}); choose another "
                     "--precision{}", id, to_string(p), list.empty() ? "none" : list,
                     cpu_node ? " (CPU partitions are planned as aiscale's CPU backend trains: "
                                "--precision fp32)" : "");
}

}  // namespace aiscale::plan
