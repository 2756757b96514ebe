#include "aiscale/train/generate.h"

#include <algorithm>
#include <cmath>

#include "aiscale/core/error.h"

namespace aiscale::train {

int32_t sample_logits(std::vector<float>& logits, float temperature, int64_t top_k, Rng& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  float cutoff = -INFINITY;
  if (top_k > 0 && top_k < V) {
    std::vector<float> sorted(logits);
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
    cutoff = sorted[top_k - 1];
  }
  const float maxv = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float& x : logits) {
    x = x < cutoff ? 0.0f : std::exp((x - maxv) / temperature);
    sum += x;
  }
  double u = static_cast<double>(rng.uniform()) * sum, acc = 0.0;
  for (int64_t i = 0; i < V; ++i) {
    acc += logits[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  for (int64_t i = V - 1; i >= 0; --i)  // rounding at the very end of the range
    if (logits[i] > 0) return static_cast<int32_t>(i);
  return 0;
}

std::vector<int32_t> generate(nn::GptModel& model, std::vector<int32_t> tokens,
                              const SampleOptions& o, Rng& rng,
                              const std::function<void(int32_t)>& on_token) {
  if (model.options().batch != 1) fail("generate() needs a model built with batch 1");
  if (tokens.empty()) fail("the prompt is empty after tokenizing: give some text");
  const int64_t T = model.options().seq, V = model.config().vocab_size;
  std::vector<int32_t> window(T), out;
  std::vector<float> logits(V);
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    // The last T tokens; positions after the context are padding that a causal model
    // cannot see from the position we read.
    const int64_t len = std::min<int64_t>(T, static_cast<int64_t>(tokens.size()));
    std::copy(tokens.end() - len, tokens.end(), window.begin());
    std::fill(window.begin() + len, window.end(), 0);
    model.forward(window.data(), nullptr);
    model.logits_at(0, len - 1, logits.data());
    int32_t next = sample_logits(logits, o.temperature, o.top_k, rng);
    tokens.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_token && static_cast<int64_t>(out.size()) >= o.min_new_tokens) break;
  }
  return out;
}

}  // namespace aiscale::train
