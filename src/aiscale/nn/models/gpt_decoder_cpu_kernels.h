// The CPU kernels of the GPT decoder (gpt_decoder.h) that the training ops do not cover:
// - attention of new token rows over a key/value cache: each row is one query at some
//   position of some stream, attending to that stream's cached keys and values at
//   positions 0..its own (the causal mask is the cache's length). The training op
//   (ops/cpu/attention.cpp) takes whole (T, T) squares; this one takes rows of different
//   streams and lengths in one call;
// - a linear layer of a few rows (decoding: one row per stream), which is a pass over the
//   weight matrix: each weight row is read from memory once and used for every input row
//   while it is in the L1 cache. OpenBLAS's sgemm packs the whole matrix first (for two
//   to eight rows several times slower than this), its sgemv takes one row.
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
// weighted sum of v_t; q of row r at qkv + r * qkv_stride (its first C values). The cache
// holds NKV key/value heads (NKV == NH, or grouped-query attention: query head h reads
// key/value head h / (NH / NKV)). Rows and heads are spread over `threads` OpenMP
// threads, each using `scratch` + thread * max_n floats for its scores (max_n >= every
// rows[r].n).
void cached_attention_forward(float* out, const float* qkv, int64_t qkv_stride,
                              const CachedRow* rows, int64_t R, int64_t stride, int64_t C,
                              int64_t NH, int64_t NKV, float* scratch, int64_t max_n,
                              int threads);

// out (R, OC) = in (R, C) @ w (OC, C)^T + b (b may be null), for small R: the output
// columns are split over the OpenMP threads; each weight row is streamed once.
void few_rows_linear(float* out, const float* in, const float* w, const float* b, int64_t R,
                     int64_t C, int64_t OC);

}  // namespace aiscale::nn
