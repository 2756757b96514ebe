// Attention of new token rows over a key/value cache on the CPU (the GPT decoder's,
// gpt_decoder.h): each row is one query at some position of some stream, attending to
// that stream's cached keys and values at positions 0..its own (the causal mask is the
// cache's length). The training op (ops/cpu/attention.cpp) takes whole (T, T) squares;
// this one takes rows of different streams and lengths in one call.
#pragma once
#include <cstdint>

namespace aiscale::nn {

// One query row's cache: n positions of keys and values, rows `stride` floats apart,
// each pointer at the first head's first channel of position 0.
struct CachedRow {
  const float* k;
  const float* v;
  int64_t n;
};

// out (R, C): for row r and head h, softmax(q . k_t / sqrt(HS)) over t < rows[r].n,
// weighted sum of v_t; q of row r at qkv + r * qkv_stride (its first C values). Rows and
// heads are spread over `threads` OpenMP threads, each using `scratch` +
// thread * max_n floats for its scores (max_n >= every rows[r].n).
void cached_attention_forward(float* out, const float* qkv, int64_t qkv_stride,
                              const CachedRow* rows, int64_t R, int64_t stride, int64_t C,
                              int64_t NH, float* scratch, int64_t max_n, int threads);

}  // namespace aiscale::nn
