// Text generation from a trained GPT: temperature and top-k sampling.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "aiscale/core/rng.h"
#include "aiscale/nn/models/gpt.h"

namespace aiscale::train {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  int32_t stop_token = -1;   // stop after generating this token (e.g. end-of-text)...
  int64_t min_new_tokens = 0;  // ...once at least this many tokens were generated: a model
                               // trained on short documents emits end-of-text early
};

// `model` must have batch 1; its sequence length is the context window used. Each new
// token is passed to `on_token` as it is produced. Returns the generated ids.
std::vector<int32_t> generate(nn::GptModel& model, std::vector<int32_t> prompt,
                              const SampleOptions& o, Rng& rng,
                              const std::function<void(int32_t)>& on_token = {});

// Picks an index from logits with temperature and top-k (pure function, tested).
int32_t sample_logits(std::vector<float>& logits, float temperature, int64_t top_k, Rng& rng);

}  // namespace aiscale::train
