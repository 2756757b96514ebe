#include "aiscale/parallel/algorithms/adasum.h"

#include <algorithm>

#include "aiscale/core/error.h"

namespace aiscale::parallel::algorithms {

void adasum_combine(const float* a, const float* b, float* out, int64_t n,
                    const std::vector<int64_t>& offsets) {
  std::vector<int64_t> bounds = offsets.empty() ? std::vector<int64_t>{0} : offsets;
  if (bounds.front() != 0) fail("internal: AdaSum's segments must start at offset 0");
  bounds.push_back(n);
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int64_t begin = bounds[s], end = bounds[s + 1];
    if (end < begin || end > n) fail("internal: AdaSum's segment offsets must ascend within the buffer");
    double dot = 0, aa = 0, bb = 0;
    for (int64_t i = begin; i < end; ++i) {
      const double x = a[i], y = b[i];
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    const double ca = aa > 0 ? 1.0 - dot / (2.0 * aa) : 1.0;
    const double cb = bb > 0 ? 1.0 - dot / (2.0 * bb) : 1.0;
    for (int64_t i = begin; i < end; ++i)
      out[i] = static_cast<float>(ca * static_cast<double>(a[i]) + cb * static_cast<double>(b[i]));
  }
}

bool adasum_supports(int world) { return world >= 1 && (world & (world - 1)) == 0; }

void adasum_allreduce(Communicator& comm, float* data, int64_t n, const std::vector<int64_t>& offsets) {
  const int world = comm.world(), rank = comm.rank();
  if (!adasum_supports(world))
    fail("parallel.grad_mixing = \"adasum\" combines ranks pairwise by recursive doubling, which "
         "needs a power-of-two number of data-parallel ranks, not {}: launch 2, 4, 8, ... ranks, "
         "or use parallel.grad_mixing = \"average\"", world);
  std::vector<float> theirs(static_cast<size_t>(n));
  for (int d = 1; d < world; d *= 2) {
    const int partner = rank ^ d;
    comm.send(data, n, partner);  // buffered: both partners send first, then receive
    comm.recv(theirs.data(), n, partner);
    comm.wait();
    // The same operands in the same order on both partners: the same bits.
    if (rank < partner) adasum_combine(data, theirs.data(), data, n, offsets);
    else adasum_combine(theirs.data(), data, data, n, offsets);
  }
}

}  // namespace aiscale::parallel::algorithms
