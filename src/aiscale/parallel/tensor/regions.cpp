#include "aiscale/parallel/tensor/regions.h"

#include <algorithm>

namespace aiscale::parallel::tensor {

namespace {

// Under sequence parallelism `full` (N, C) = every rank's `rows` (rows, C) gathered in
// rank order, and returned; else `rows` itself, which holds all N rows.
const float* gather_rows(const TensorGroup& g, const float* rows, float* full, int64_t n,
                         int64_t c) {
  if (!g.sequence_parallel || !g.split()) return rows;
  g.comm->allgather(rows, full, g.rows(n) * c);
  return full;
}

// `sum` (rows, C) = the sum over the ranks of each rank's `part` (N, C): reduce-scattered
// by rows under sequence parallelism, else all-reduced in place and copied.
void sum_parts(const TensorGroup& g, float* part, float* sum, int64_t n, int64_t c) {
  if (!g.split()) {
    if (sum != part) std::copy(part, part + n * c, sum);
    return;
  }
  if (g.sequence_parallel) {
    g.comm->reduce_scatter_sum(part, sum, g.rows(n) * c);
    return;
  }
  g.comm->allreduce_sum(part, n * c);
  if (sum != part) std::copy(part, part + n * c, sum);
}

}  // namespace

const float* enter_forward(const TensorGroup& g, const float* x, float* full, int64_t n, int64_t c) {
  return gather_rows(g, x, full, n, c);
}

void enter_backward(const TensorGroup& g, float* dfull, float* dx, int64_t n, int64_t c) {
  sum_parts(g, dfull, dx, n, c);
}

void leave_forward(const TensorGroup& g, float* partial, float* out, int64_t n, int64_t c) {
  sum_parts(g, partial, out, n, c);
}

const float* leave_backward(const TensorGroup& g, const float* dout, float* dfull, int64_t n,
                            int64_t c) {
  return gather_rows(g, dout, dfull, n, c);
}

void sum_over_ranks(const TensorGroup& g, float* x, int64_t n) {
  if (g.split()) g.comm->allreduce_sum(x, n);
}

}  // namespace aiscale::parallel::tensor
