// The vision op set's names and the "cpu" backend's table.
#include <array>
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/ops/vision/cpu_kernels.h"

namespace aiscale::ops::vision {
namespace {

constexpr std::array<std::string_view, kVisionOpCount> kNames{
    "conv2d_forward",    "conv2d_backward",  "batchnorm_stats",
    "batchnorm_forward", "batchnorm_backward_reduce", "batchnorm_backward",
    "relu_forward",      "relu_backward",    "maxpool_forward",
    "maxpool_backward",  "avgpool_forward",  "avgpool_backward",
    "xent_smooth_forward", "xent_smooth_backward"};

}  // namespace

std::string_view vision_op_name(VisionOp op) { return kNames.at(static_cast<size_t>(op)); }

std::optional<VisionOp> vision_op_by_name(std::string_view name) {
  for (int i = 0; i < kVisionOpCount; ++i) {
    if (kNames[i] == name) return static_cast<VisionOp>(i);
  }
  return std::nullopt;
}

int64_t conv2d_scratch_floats(const ConvShape& s) { return cpu::conv2d_scratch_floats(s); }

const VisionBackend& vision_cpu_backend() {
  static const VisionBackend backend{
      "cpu",
      cpu::conv2d_forward,
      cpu::conv2d_backward,
      cpu::batchnorm_stats,
      cpu::batchnorm_forward,
      cpu::batchnorm_backward_reduce,
      cpu::batchnorm_backward,
      cpu::relu_forward,
      cpu::relu_backward,
      cpu::maxpool_forward,
      cpu::maxpool_backward,
      cpu::avgpool_forward,
      cpu::avgpool_backward,
      cpu::xent_smooth_forward,
      cpu::xent_smooth_backward};
  return backend;
}

const VisionBackend& vision_backend_by_name(std::string_view name) {
  if (name == "reference") return vision_reference_backend();
  if (name == "cpu") return vision_cpu_backend();
  fail("unknown vision backend '{}': use reference or cpu", std::string(name));
}

}  // namespace aiscale::ops::vision
