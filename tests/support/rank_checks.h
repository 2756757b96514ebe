// For the check programs that a test starts as several ranks (mpi/split_ranks.cpp,
// gpu2/nccl_split_ranks.cpp): each rank counts the checks that went wrong, naming each on
// stderr with its rank, so that the program can sum the count over the ranks and exit
// non-zero when any rank saw a wrong value.
#pragma once
#include <cstdio>
#include <string>

#include "aiscale/parallel/comm.h"

namespace aiscale::testsupport::rank_checks {

inline int failures = 0;
inline int my_rank = -1;  // set by main() once the communicator is up

inline void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: wrong: %s\n", my_rank, what.c_str());
  ++failures;
}

// The sum of `v` over the ranks of `c` (float or double).
template <typename T>
T sum_over(parallel::Communicator& c, T v) {
  c.allreduce_sum(&v, 1);
  return v;
}

}  // namespace aiscale::testsupport::rank_checks
