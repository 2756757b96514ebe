// The language benchmark: GPT training steps on synthetic tokens, timed after warm-up.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::bench {

struct LanguageBenchOptions {
  std::string model_name = "gpt-mini";
  nn::GptConfig model = nn::gpt_preset("gpt-mini");
  int64_t batch = 8;
  int64_t seq = 128;
  int64_t grad_accum = 1;
  int64_t steps = 10;   // timed steps
  int64_t warmup = 2;   // untimed steps before
  std::string device = "cpu";
  std::string precision = "fp32";
  int64_t threads = 0;
  bool recompute = false;
  std::string attention = "auto";  // GPU: auto | cudnn | flash | simple
  uint64_t seed = 1;
  // Tokens/s of one device alone (a 1-GPU run of the same workload): when > 0 the record
  // gets scaling_efficiency = tokens/s per device / this.
  double baseline_tokens_per_s = 0;
  // Several GPU ranks (NCCL): ZeRO stage (0 or 1), buckets overlapped with backward.
  int zero_stage = 0;
  bool overlap = true;
  double bucket_mib = 25;
  std::string grad_comm = "fp32";  // fp32 | bf16
  std::string grad_transport = "nccl";  // nccl | copy-engine
  // When set: every rank's per-step records go to this folder's steps.jsonl (rank 0
  // writes; the folder must exist). See docs/guide/scaling.md#per-step-records.
  std::string steps_dir;
};

// Runs the benchmark and returns one JSON record (see docs/guide/bench.md for the fields).
nlohmann::json run_language_bench(const LanguageBenchOptions& o, parallel::Communicator& comm);

}  // namespace aiscale::bench
