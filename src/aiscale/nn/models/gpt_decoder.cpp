#include "aiscale/nn/models/gpt_decoder.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"

namespace aiscale::nn {

GptDecoderOptions resolved_decoder_options(const GptConfig& c, const GptDecoderOptions& o) {
  c.validate();
  GptDecoderOptions r = o;
  if (r.streams < 1 || r.streams > (int64_t{1} << 20))
    fail("the decoder's streams = {} is outside 1..{}", r.streams, int64_t{1} << 20);
  if (r.context == 0) r.context = c.block_size;
  if (r.context < 1 || r.context > c.block_size)
    fail("a decoding context of {} positions is outside 1..{} (the model's block_size: its "
         "position embeddings)", r.context, c.block_size);
  if (r.max_rows == 0) r.max_rows = std::max<int64_t>(r.streams, 128);
  if (r.max_rows < 1) fail("the decoder's max_rows = {} is invalid: it must be at least 1", r.max_rows);
  // The cache's size without overflow, refused when absurd (before any allocation).
  const int64_t per_stream = validate::checked_product(
      validate::checked_product(2 * c.n_layer, r.context, "the key/value cache"), c.n_embd,
      "the key/value cache");
  validate::buffer_bytes(static_cast<uint64_t>(validate::checked_product(
                             per_stream, r.streams, "the key/value cache")),
                         sizeof(float),
                         fmt::format("a key/value cache of {} streams x {} positions", r.streams,
                                     r.context));
  return r;
}

int64_t check_feed(const GptConfig& c, const GptDecoderOptions& o, const int64_t* length,
                   const int32_t* tokens, const int64_t* counts) {
  int64_t total = 0;
  for (int64_t s = 0; s < o.streams; ++s) {
    if (counts[s] < 0) fail("feed(): stream {} is given {} tokens", s, counts[s]);
    if (length[s] + counts[s] > o.context)
      fail("stream {} holds {} of {} positions and is fed {} more: the window is full (reset "
           "the stream, or restart it with its last tokens)", s, length[s], o.context, counts[s]);
    total += counts[s];
  }
  for (int64_t i = 0; i < total; ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      fail("token id {} is outside the model's vocabulary 0..{}", tokens[i], c.vocab_size - 1);
  return total;
}

std::unique_ptr<GptDecoder> make_gpt_decoder(const std::string& device, const GptConfig& c,
                                             const GptDecoderOptions& o) {
  if (device == "cpu") return make_gpt_decoder_cpu(c, o);
  if (device == "cuda") return make_gpt_decoder_cuda(c, o);
  fail("unknown device '{}' for decoding: use cpu or cuda", device);
}

}  // namespace aiscale::nn
