#include "aiscale/plan/accelerator.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "aiscale/core/ascii.h"
#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::plan {

namespace {

constexpr EnumName<Precision> precisions[] = {
    {Precision::fp32, "fp32"}, {Precision::fp32, "float32"},  {Precision::tf32, "tf32"},
    {Precision::bf16, "bf16"}, {Precision::bf16, "bfloat16"}, {Precision::bf16, "amp"},
    {Precision::fp16, "fp16"}, {Precision::fp16, "float16"},  {Precision::fp8, "fp8"}};

}  // namespace

// Names are read without regard to case ("BF16").
Precision parse_precision(std::string_view text) {
  if (const std::optional<Precision> p = find_enum(precisions, ascii_lower(text))) return *p;
  fail("unknown precision '{}': use {}", text, enum_choices(precisions));
}

std::string_view to_string(Precision p) { return enum_name(precisions, p); }

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
