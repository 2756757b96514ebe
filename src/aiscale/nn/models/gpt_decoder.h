// Autoregressive decoding of the GPT-2 model with a key/value cache: the inference side of
// gpt.h. A decoder holds `streams` sequences at once; each has its own window of cached
// keys and values (up to `context` positions per layer), so a new token costs one row
// through the layers instead of a forward over the whole window. One call feeds any number
// of tokens to any of the streams (a prompt to one, a single token to the others) and
// returns, per fed stream, the logits after its last token: prefill and decoding are the
// same operation, and a stream can be restarted while the others keep decoding.
//
// The weights are the training model's flat fp32 buffer (GptLayout order, gpt_layout.h),
// so a checkpoint or a GptModel's parameters load unchanged. Everything (cache,
// activations, logits) is allocated when the decoder is made; a call allocates nothing.
// The logits match GptModel::forward over the same window (tests/nn/gpt_decoder_test.cpp:
// within 1e-4, the last bits of the different GEMM shapes).
//
// The CPU implementation is gpt_decoder_cpu.cpp; the GPU one, gpt_decoder_cuda.cpp, takes
// the same calls (host token ids in, host logits out) and keeps its cache in device memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::nn {

struct GptDecoderOptions {
  int64_t streams = 1;   // sequences decoded together (the batch)
  int64_t context = 0;   // positions each stream's cache holds, 1..block_size; 0: block_size
  // The most token rows pushed through the layers at once: longer feeds (prompts) run in
  // chunks of this many rows, each chunk attending to the cache the earlier ones filled.
  // Bounds the activation memory; 0: max(streams, 128).
  int64_t max_rows = 0;
};

class GptDecoder {
 public:
  virtual ~GptDecoder() = default;
  virtual const GptConfig& config() const = 0;
  virtual const GptDecoderOptions& options() const = 0;  // with context, max_rows resolved
  virtual std::string device_name() const = 0;
  int64_t streams() const { return options().streams; }
  int64_t context() const { return options().context; }
  int64_t vocab_size() const { return config().vocab_size; }

  // Loads the weights: the flat fp32 buffer of the training model (GptLayout order,
  // num_params() values), copied. Needed before the first feed.
  virtual void set_params(const float* params) = 0;

  // Tokens in stream s's window (its next token goes to this position).
  virtual int64_t length(int64_t s) const = 0;
  // Empties stream s's window: its next token starts a new sequence at position 0.
  virtual void reset(int64_t s) = 0;
  void reset_all() {
    for (int64_t s = 0; s < streams(); ++s) reset(s);
  }

  // Appends counts[s] tokens to stream s (0: the stream idles in this call), the streams'
  // tokens one after another in `tokens` (stream 0's first). For each stream fed, row s of
  // `logits` (streams x vocab_size, host memory) receives the logits that follow its last
  // token; the rows of idle streams are left as they were. A stream's window must have
  // room: length(s) + counts[s] <= context() (reset or restart it otherwise; the sampler
  // slides its window, train/generate.h). Token ids must lie in [0, vocab_size).
  virtual void feed(const int32_t* tokens, const int64_t* counts, float* logits) = 0;

  // Bytes of (host or device) memory the decoder holds: weights, cache, activations.
  virtual size_t memory_bytes() const = 0;
  // Of those, the key/value cache: 2 x streams x layers x context x C floats.
  virtual size_t cache_bytes() const = 0;
};

// The options with context and max_rows resolved, checked against the model (an error
// names the option and its range).
GptDecoderOptions resolved_decoder_options(const GptConfig& c, const GptDecoderOptions& o);

// The checks of a feed() call, for every implementation, before it computes anything (a
// refused call changes nothing): counts not negative, every stream's window with room
// (`length`: each stream's tokens so far), token ids in the vocabulary. Returns the
// number of tokens fed.
int64_t check_feed(const GptConfig& c, const GptDecoderOptions& o, const int64_t* length,
                   const int32_t* tokens, const int64_t* counts);

std::unique_ptr<GptDecoder> make_gpt_decoder_cpu(const GptConfig& c, const GptDecoderOptions& o);
// On the current GPU (gpt_decoder_cuda.cpp over gpt_cuda_decoder.h: bf16 weights and cache,
// fp32 logits; decoding steps replayed as CUDA graphs). Without CUDA, set_params fails
// naming the fix.
std::unique_ptr<GptDecoder> make_gpt_decoder_cuda(const GptConfig& c, const GptDecoderOptions& o);
// By device name: "cpu" or "cuda".
std::unique_ptr<GptDecoder> make_gpt_decoder(const std::string& device, const GptConfig& c,
                                             const GptDecoderOptions& o);

}  // namespace aiscale::nn
