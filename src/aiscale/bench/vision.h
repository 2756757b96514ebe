// The vision benchmark: ResNet training steps (forward, backward, gradient all-reduce over
// the ranks, SGD update) on synthetic images held in memory (on the device for a GPU run),
// timed after warm-up, so the figure is the model's compute and communication without any
// image pipeline.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"

namespace aiscale::bench {

struct VisionBenchOptions {
  std::string model = "resnet50";  // a ResNet preset
  std::string device = "cpu";      // cpu | cuda
  std::string precision = "fp32";  // cuda: fp32 | bf16 | fp16 (AMP)
  bool tf32 = false;               // cuda fp32: TF32 convolutions
  std::string batchnorm = "auto";  // cuda: auto | own | cudnn batch norm kernels
  int64_t cudnn_workspace_mib = -1;  // cuda: cuDNN's workspace in MiB, -1 automatic
  bool overlap = true;             // cuda ranks: bucketed all-reduce during the backward
  int64_t batch_size = 0;          // images per rank; 0: 16 on the CPU, 256 on a GPU
  int64_t image_size = 0;          // 0: the preset's (224; 28 for resnet-small)
  int64_t steps = 10;              // timed steps
  int64_t warmup = 2;              // untimed steps first
  int64_t threads = 0;             // CPU threads; 0 = all cores
  uint64_t seed = 1;
};

// Runs the benchmark and returns one JSON record (fields: docs/guide/vision.md).
nlohmann::json run_vision_bench(const VisionBenchOptions& o, parallel::Communicator& comm);

}  // namespace aiscale::bench
