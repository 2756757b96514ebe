// Tensor parallelism's communication, written as forward/backward pairs around the
// regions where each rank holds a slice of a layer (Megatron-LM's f and g operators):
//
//   entering (before a column-parallel layer): forward identity, backward all-reduce of
//     the input gradient; with sequence parallelism forward all-gather of the token
//     slices, backward reduce-scatter;
//   leaving (after a row-parallel layer): forward all-reduce of the partial outputs,
//     backward identity; with sequence parallelism forward reduce-scatter to the token
//     slices, backward all-gather.
//
// Shapes: a region outside the tensor-parallel layers holds `rows` tokens of width C on
// each rank (all N = B*T tokens, or N / size of them with sequence parallelism: rank r
// holds tokens [r * rows, (r + 1) * rows)); inside, every rank sees all N tokens.
#pragma once
#include <cstdint>

#include "aiscale/parallel/comm.h"

namespace aiscale::parallel::tensor {

struct TensorGroup {
  Communicator* comm = nullptr;  // null: one rank, nothing to exchange
  int size = 1, rank = 0;
  bool sequence_parallel = false;
  bool split() const { return size > 1; }
  // Tokens a rank holds outside the tensor-parallel layers, of n.
  int64_t rows(int64_t n) const { return sequence_parallel ? n / size : n; }
  // The first of them.
  int64_t first_row(int64_t n) const { return sequence_parallel ? rank * (n / size) : 0; }
};

// Entering. Forward: returns the (N, C) input of the layer: `x` itself, or (sequence
// parallel) the token slices of every rank gathered into `full`.
const float* enter_forward(const TensorGroup& g, const float* x, float* full, int64_t n, int64_t c);
// Backward: `dfull` (N, C) holds this rank's part of the input gradient (from its slice of
// the weights); `dx` (rows, C) gets the sum over the ranks. Without sequence parallelism
// dx may be dfull (then it is summed in place).
void enter_backward(const TensorGroup& g, float* dfull, float* dx, int64_t n, int64_t c);

// Leaving. Forward: `partial` (N, C) holds this rank's part of the output; `out` (rows, C)
// gets the sum over the ranks (out may be partial without sequence parallelism).
void leave_forward(const TensorGroup& g, float* partial, float* out, int64_t n, int64_t c);
// Backward: returns the (N, C) output gradient every rank's slice needs: `dout` itself, or
// (sequence parallel) every rank's (rows, C) gathered into `dfull`.
const float* leave_backward(const TensorGroup& g, const float* dout, float* dfull, int64_t n,
                            int64_t c);

// Sum over the tensor ranks of n values in place (gradients of replicated parameters with
// sequence parallelism, where each rank saw only its tokens).
void sum_over_ranks(const TensorGroup& g, float* x, int64_t n);

}  // namespace aiscale::parallel::tensor
