// Text generation on one GPU with a key/value cache: the GPT-2 forward for a set of rows,
// each one position of one stream, reading every earlier position of its stream from the
// cache. Prefill is one call with a stream's prompt positions as rows; decoding is one call
// with one row per stream. Weights in bf16 (as the training kernels' working copy), the
// cache in bf16, logits in fp32. Up to 8 rows a call (a decoding step of a few streams),
// the linear layers are matrix-vector kernels of the decoder's own with the LayerNorm before
// them, and bias, GELU and residual after them, fused in; attention over the cache appends
// the step's keys and values itself. Beyond 8 rows the training ops do the work (LayerNorm,
// cuBLASLt linear layers with fused epilogues). A decoding step of the same number of
// streams is replayed as one CUDA graph (a step of GPT-2 124M is ~60 small kernels:
// launched one by one, their gaps would dominate).
// Host code in every build (no CUDA types here); without CUDA, make_cuda_gpt_decoder fails.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::nn {

// One position of one stream.
struct DecodeRow {
  int32_t stream = 0;    // 0 .. max_streams-1
  int32_t position = 0;  // 0 .. context-1; the stream's positions before it are cached
  int32_t token = 0;     // 0 .. vocab_size-1
};

class CudaGptDecoder {
 public:
  virtual ~CudaGptDecoder() = default;
  // Runs `rows` (the rows of one stream in increasing position, without gaps after what
  // the cache holds) and returns the fp32 logits (n_out, vocab_size) of the rows
  // out_rows[0..n_out) (indices into rows): in `dest` (host memory of n_out x vocab_size
  // floats, pinned by the decoder at its first use and kept pinned while it is passed
  // again), or with dest null in the decoder's pinned buffer, valid until the next call.
  // Throws Error for a row outside the decoder's limits.
  virtual const float* run(const DecodeRow* rows, int n_rows, const int32_t* out_rows, int n_out,
                           float* dest = nullptr) = 0;
  virtual int max_streams() const = 0;
  virtual int max_rows() const = 0;
  virtual int context() const = 0;  // positions each stream's cache holds
  virtual std::string device_name() const = 0;
};

// A decoder of the model with flat fp32 parameters `params` (GptLayout order, num_params
// values) for up to `max_streams` streams of `context` positions (1..block_size; 0: the
// block size) and `max_rows` rows per call, on the current GPU.
std::unique_ptr<CudaGptDecoder> make_cuda_gpt_decoder(const GptConfig& c, const float* params,
                                                      int max_streams, int max_rows,
                                                      int context = 0);

}  // namespace aiscale::nn
