#include "aiscale/parallel/tensor/regions.h"

#include <algorithm>

namespace aiscale::parallel::tensor {

const float* enter_forward(const TensorGroup& g, const float* x, float* full, int64_t n, int64_t c) {
  if (!g.sequence_parallel || !g.split()) return x;
  g.comm->allgather(x, full, g.rows(n) * c);
  return full;
}

void enter_backward(const TensorGroup& g, float* dfull, float* dx, int64_t n, int64_t c) {
  if (!g.split()) {
    if (dx != dfull) std::copy(dfull, dfull + n * c, dx);
    return;
  }
  if (g.sequence_parallel) {
    g.comm->reduce_scatter_sum(dfull, dx, g.rows(n) * c);
    return;
  }
  g.comm->allreduce_sum(dfull, n * c);
  if (dx != dfull) std::copy(dfull, dfull + n * c, dx);
}

void leave_forward(const TensorGroup& g, float* partial, float* out, int64_t n, int64_t c) {
  if (!g.split()) {
    if (out != partial) std::copy(partial, partial + n * c, out);
    return;
  }
  if (g.sequence_parallel) {
    g.comm->reduce_scatter_sum(partial, out, g.rows(n) * c);
    return;
  }
  g.comm->allreduce_sum(partial, n * c);
  if (out != partial) std::copy(partial, partial + n * c, out);
}

const float* leave_backward(const TensorGroup& g, const float* dout, float* dfull, int64_t n,
                            int64_t c) {
  if (!g.sequence_parallel || !g.split()) return dout;
  g.comm->allgather(dout, dfull, g.rows(n) * c);
  return dfull;
}

void sum_over_ranks(const TensorGroup& g, float* x, int64_t n) {
  if (g.split()) g.comm->allreduce_sum(x, n);
}

}  // namespace aiscale::parallel::tensor
