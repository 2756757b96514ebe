// The pieces of text generation that are pure functions of their inputs, apart from the
// model: choosing the next token from logits (temperature, top-k, top-p) and finding stop
// sequences in the decoded text as it grows token by token.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/rng.h"

namespace aiscale::train {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  // Nucleus sampling: keep the fewest most likely tokens whose probabilities (after
  // temperature and top-k) sum to at least top_p; 1: all.
  float top_p = 1.0f;
};

// Refuses impossible settings with the option's name (--temperature, --top-k, --top-p).
void check_sampling_params(const SamplingParams& p);

struct TokenProbability {
  int32_t token;
  double probability;
};

// Chooses tokens from logits. Holds its scratch (vocabulary-sized), so that a pick
// allocates nothing after the first; one per thread.
class TokenSampler {
 public:
  // The tokens that can be drawn and their probabilities (summing to 1), most likely
  // first (ties: lower id first); greedy: the most likely token alone with probability 1.
  std::vector<TokenProbability> distribution(const float* logits, int64_t vocab,
                                             const SamplingParams& p);
  // One token drawn from distribution() with one uniform number of `rng` (none when
  // greedy): the same logits, parameters and generator state give the same token.
  int32_t pick(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng);

 private:
  // Fills kept_ (count_ entries, most likely first) and their weights exp((l - max) / T).
  void keep(const float* logits, int64_t vocab, const SamplingParams& p);
  std::vector<int32_t> order_;
  std::vector<double> weight_;
  int64_t count_ = 0;
  double total_ = 0.0;
};

// A stream's generated text and the stop sequences that end it, matched on the decoded
// bytes however the tokens split them.
class StopText {
 public:
  explicit StopText(std::vector<std::string> stops = {});
  // Appends a token's bytes. Returns true when a stop sequence now occurs: the text is then
  // cut where the first (leftmost) one begins and matched() names it.
  bool append(std::string_view bytes);
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }
  // How much of text() is final: all of it once stopped, else all but the longest tail
  // that could still grow into a stop sequence (so a stop text is never shown).
  size_t final_length() const;

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string text_, matched_;
  bool stopped_ = false;
};

// Text with C escapes (\n, \t, \r, \\, \") turned into their bytes, for options that
// take control characters (--stop); an unknown escape is kept as written.
std::string unescape(std::string_view text);

}  // namespace aiscale::train
