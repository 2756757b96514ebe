// Run on 2-4 MPI ranks by allreduce_algorithms_mpitest.cpp: the ring and hierarchical
// all-reduce of the MPI communicator against MPI's own, on sizes 1, 7 and 1000003:
// integer-valued floats bit for bit, random floats within rounding, and the same bits on
// every rank. Argument: ranks per node for the hierarchical algorithm (0: the real
// nodes). Prints "algorithm checks passed on rank R" per rank; exits non-zero when any
// rank saw a wrong value.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "aiscale/parallel/bootstrap.h"

using namespace aiscale::parallel;
using namespace aiscale::parallel::algorithms;

namespace {

int failures = 0;

std::vector<float> values(int rank, int64_t n, bool integers) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 gen(static_cast<uint32_t>(77 + rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = integers ? static_cast<float>((i * 5 + rank * 11) % 997 - 498) : u(gen);
  return v;
}

void check(Communicator& library, Communicator& algo, const std::string& name, int64_t n, bool integers) {
  const int rank = library.rank();
  std::vector<float> want = values(rank, n, integers), got = want;
  library.allreduce_sum(want.data(), n);
  algo.allreduce_sum(got.data(), n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float w = want[static_cast<size_t>(i)], g = got[static_cast<size_t>(i)];
    const bool ok = integers ? std::memcmp(&w, &g, 4) == 0 : std::abs(w - g) <= 1e-5f * (1 + std::abs(w));
    if (!ok && wrong++ < 3)
      std::fprintf(stderr, "rank %d: %s n %lld value %lld: %g, the library says %g\n", rank,
                   name.c_str(), static_cast<long long>(n), static_cast<long long>(i), g, w);
  }
  // The same bits on every rank: rank 0's result broadcast and compared.
  std::vector<float> first = got;
  library.broadcast(first.data(), n, 0);
  if (std::memcmp(first.data(), got.data(), static_cast<size_t>(n) * 4) != 0) {
    std::fprintf(stderr, "rank %d: %s n %lld: other bits than rank 0\n", rank, name.c_str(), static_cast<long long>(n));
    ++wrong;
  }
  if (wrong > 0) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int per_node = argc > 1 ? std::atoi(argv[1]) : 0;
    // The first communicator initialises (and finalises) MPI; the others share MPI_COMM_WORLD.
    auto library = make_mpi_communicator({});
    AllreduceSetting ring{AllreduceAlgorithm::ring, 0, kDefaultChunkFloats};
    AllreduceSetting small_chunks{AllreduceAlgorithm::ring, 0, 1000};
    AllreduceSetting hier{AllreduceAlgorithm::hierarchical, per_node, 4096};
    AllreduceSetting hier_real{AllreduceAlgorithm::hierarchical, 0, kDefaultChunkFloats};
    struct Named {
      std::string name;
      std::unique_ptr<Communicator> comm;
    };
    std::vector<Named> algos;
    algos.push_back({"ring", make_mpi_communicator(ring)});
    algos.push_back({"ring (chunks of 1000)", make_mpi_communicator(small_chunks)});
    algos.push_back({"hierarchical (" + std::to_string(per_node) + " per node)", make_mpi_communicator(hier)});
    algos.push_back({"hierarchical (real nodes)", make_mpi_communicator(hier_real)});
    // A split keeps the algorithm: the sub-group of even ranks sums with it too.
    auto evens = algos[2].comm->split(library->rank() % 2, library->rank());
    auto lib_evens = library->split(library->rank() % 2, library->rank());
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}})
      for (bool integers : {true, false}) {
        for (auto& a : algos) check(*library, *a.comm, a.name, n, integers);
        check(*lib_evens, *evens, "hierarchical split", n, integers);
      }
    const int rank = library->rank();
    evens.reset();
    lib_evens.reset();
    algos.clear();
    if (failures == 0) std::printf("algorithm checks passed on rank %d\n", rank);
    std::fflush(stdout);
    library.reset();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
