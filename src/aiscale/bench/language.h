// The language benchmark: GPT training steps on synthetic tokens, timed after warm-up.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"

namespace aiscale::bench {

struct LanguageBenchOptions {
  // The run settings (model, batch_size, seq_len, grad_accum, device, precision, threads,
  // recompute, attention and the parallel keys), as `aiscale train` has them: the same
  // options fill both (cli/run_options.h). The schedule and step count are the benchmark's.
  train::TrainConfig run;
  int64_t steps = 10;   // timed steps
  int64_t warmup = 2;   // untimed steps before
  uint64_t seed = 1;
  // Tokens/s of one device alone (a 1-GPU run of the same workload): when > 0 the record
  // gets scaling_efficiency = tokens/s per device / this.
  double baseline_tokens_per_s = 0;
  // When set: every rank's per-step records go to this folder's steps.jsonl (rank 0
  // writes; the folder must exist). See docs/guide/scaling.md#per-step-records.
  std::string steps_dir;
  // --profile STEPS: profile the first STEPS timed steps into profile_dir (files named
  // <profile_stem>trace.json, ...op_table.json, ...op_table.md). 0: no profile.
  int64_t profile_steps = 0;
  std::string profile_dir, profile_stem;
};

// Runs the benchmark and returns one JSON record (see docs/guide/bench.md for the fields).
nlohmann::json run_language_bench(const LanguageBenchOptions& o, parallel::Communicator& comm);

}  // namespace aiscale::bench
