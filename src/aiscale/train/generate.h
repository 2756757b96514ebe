// Text generation from a trained GPT through a key/value-cache decoder
// (nn/models/gpt_decoder.h): prompts decoded together as one batch of streams, each with
// its own random generator and its own stop state. More prompts than the decoder has
// streams queue up: a stream that ends takes the next prompt while the others decode.
//
// The window: a prompt longer than the decoder's context keeps its last `context` tokens;
// a stream whose window is full restarts it with its last slide_keep(context) tokens (the
// new one included) at positions 0.. (prefilled again), so its logits are always those
// of the training model's forward over the window it holds. The window slides by half
// the context at a time rather than by one token: with absolute position embeddings every
// slide recomputes the window, and half a context keeps that to about one prefilled token
// per generated one.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/train/sampling.h"

namespace aiscale::data {
class Tokenizer;
}
namespace aiscale::nn {
class GptDecoder;
}

namespace aiscale::train {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  // End-of-text ends a stream only once it has this many tokens: a model trained on short
  // documents writes it early; before then it reads as a newline and decoding goes on.
  int64_t min_new_tokens = 0;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop sequences, matched on the decoded text
  int32_t end_of_text = -1;       // the tokenizer's end-of-text id (-1: none)
  uint64_t seed = 42;             // stream i draws from Rng(stream_seed(seed, i))
};

enum class StopReason { length, end_of_text, stop_sequence };
// "length", "end_of_text", "stop_sequence".
const char* stop_reason_name(StopReason r);

struct SampleResult {
  int64_t index = 0;          // the prompt's position in the list given
  std::vector<int32_t> ids;   // the tokens generated, end-of-text included
  std::string text;           // their text (end-of-text as a newline), cut before a stop sequence
  StopReason reason = StopReason::length;
  std::string stop_sequence;  // the stop sequence that ended it
};

struct GenerateCallbacks {
  // Text of stream `index` that is final (no stop sequence can begin in it), as it grows.
  std::function<void(int64_t index, std::string_view text)> on_text;
  // A stream ended (in the order they end).
  std::function<void(const SampleResult&)> on_done;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;     // prefilled from the prompts
  int64_t generated_tokens = 0;
  int64_t refed_tokens = 0;      // prefilled again when a window slid
  double seconds = 0.0;          // in the decoder and the sampling
};

// The tokens a full window restarts with.
int64_t slide_keep(int64_t context);
// The seed of stream i's generator: distinct streams for distinct i, stream 0 = seed.
uint64_t stream_seed(uint64_t seed, int64_t stream);

// Generates a continuation of every prompt (token ids; an empty prompt starts from
// end-of-text, as documents do in the training data). Results in prompt order.
std::vector<SampleResult> generate(nn::GptDecoder& decoder, const data::Tokenizer& tokenizer,
                                   const std::vector<std::vector<int32_t>>& prompts,
                                   const SampleOptions& o, const GenerateCallbacks& cb = {},
                                   GenerateStats* stats = nullptr);

}  // namespace aiscale::train
