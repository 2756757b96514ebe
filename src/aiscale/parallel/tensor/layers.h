// Tensor-parallel layers over one op backend: column- and row-parallel linear layers, the
// vocabulary-parallel embedding and the vocabulary-parallel cross-entropy. On one rank
// each is exactly the plain op sequence (the same calls, the same bits).
//
// A linear layer's weight W is (OC, C) (out, in). Column-parallel: this rank holds OC/size
// rows of W (and of the bias) and computes those output channels for all N tokens; its
// input enters a tensor region. Row-parallel: this rank holds C/size columns of W, takes
// the matching slice of the input channels and leaves the region with the sum of the
// ranks' partial outputs; the bias (whole on every rank) is added once, after the sum.
#pragma once
#include <cstdint>

#include "aiscale/ops/ops.h"
#include "aiscale/parallel/tensor/regions.h"

namespace aiscale::parallel::tensor {

// out (N, OCl) = x (N, C) @ w (OCl, C)^T + b (OCl). `x` (rows, C) enters the region
// (`x_full` (N, C) receives the gathered tokens with sequence parallelism). Returns the
// (N, C) input used, which backward needs.
const float* column_forward(const ops::Backend& ops, const TensorGroup& g, float* out,
                            const float* x, float* x_full, const float* w, const float* b,
                            int64_t n, int64_t c, int64_t ocl);
// dx (rows, C) overwritten with the input gradient summed over the ranks; dw, db +=
// (db may be null). `dx_full` (N, C): scratch (may be dx without sequence parallelism).
void column_backward(const ops::Backend& ops, const TensorGroup& g, float* dx, float* dx_full,
                     float* dw, float* db, const float* dout, const float* x_used,
                     const float* w, int64_t n, int64_t c, int64_t ocl);

// out (rows, OC) = sum over ranks of x (N, Cl) @ w (OC, Cl)^T, + b (OC). `partial` (N, OC):
// scratch (may be out without sequence parallelism).
void row_forward(const ops::Backend& ops, const TensorGroup& g, float* out, float* partial,
                 const float* x, const float* w, const float* b, int64_t n, int64_t cl,
                 int64_t oc);
// dx (N, Cl) overwritten; dw +=; db (OC) += over this rank's rows of dout (rows, OC) (all
// of them, and the same on every rank, without sequence parallelism). `dout_full` (N, OC):
// scratch for the gathered gradient.
void row_backward(const ops::Backend& ops, const TensorGroup& g, float* dx, float* dw, float* db,
                  const float* dout, float* dout_full, const float* x, const float* w, int64_t n,
                  int64_t cl, int64_t oc);

// The vocabulary slice of a rank: token ids [first, first + size) of the vocabulary.
struct VocabSlice {
  int64_t first = 0, size = 0;
};

// out (rows, C) = wte[token] + wpe[position] for this rank's rows of the (B, T) tokens;
// wte (vocab.size, C) holds the rank's slice of the vocabulary (rows of other ranks' tokens
// are summed in from them); wpe null: no position embedding. `partial` (N, C): scratch (may be out without sequence
// parallelism).
void vocab_embedding_forward(const ops::Backend& ops, const TensorGroup& g, float* out,
                             float* partial, const int32_t* tokens, const float* wte,
                             const float* wpe, VocabSlice vocab, int64_t B, int64_t T, int64_t C);
// dwte (vocab.size, C) += for this slice's tokens; dwpe += for this rank's rows. `dout_full`
// (N, C): scratch.
void vocab_embedding_backward(const ops::Backend& ops, const TensorGroup& g, float* dwte,
                              float* dwpe, const float* dout, float* dout_full,
                              const int32_t* tokens, VocabSlice vocab, int64_t B, int64_t T,
                              int64_t C);

// Cross-entropy over logits split by vocabulary: `logits` (N, vocab.size) holds this
// rank's columns. losses (N) = log sum_v exp(logit_v) - logit_target, over the whole
// vocabulary, on every rank. `stats` (N * (size + 2)): kept for backward.
void vocab_xent_forward(const ops::Backend& ops, const TensorGroup& g, float* losses,
                        float* stats, const float* logits, const int32_t* targets, int64_t n,
                        VocabSlice vocab);
// dlogits (N, vocab.size), may alias logits: dlosses * (softmax - onehot) on this slice.
void vocab_xent_backward(const ops::Backend& ops, const TensorGroup& g, float* dlogits,
                         const float* logits, const float* stats, const int32_t* targets,
                         const float* dlosses, int64_t n, VocabSlice vocab);

}  // namespace aiscale::parallel::tensor
