// The sampling benchmark: prefill and decoding through the GPT decoder with its key/value
// cache (nn/models/gpt_decoder.h), on random weights and random prompt tokens (the time of
// a step does not depend on either), streams decoded together as one batch.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace aiscale::bench {

struct SampleBenchOptions {
  std::string model = "gpt2-124m";  // a GPT preset (nn::gpt_preset)
  int64_t streams = 1;              // sequences decoded together
  int64_t prompt_len = 64;          // tokens prefilled per stream
  int64_t tokens = 64;              // tokens decoded per stream (timed)
  int64_t warmup = 4;               // untimed decoding steps before (after an untimed prefill)
  int64_t context = 0;              // the decoder's window; 0: the model's block_size
  std::string device = "cpu";
  uint64_t seed = 1;
};

// Runs the benchmark and returns one JSON record (fields in docs/guide/bench.md).
nlohmann::json run_sample_bench(const SampleBenchOptions& o);

}  // namespace aiscale::bench
