// The TCP communicator: CPU ranks that talk over plain TCP connections (a full mesh,
// tcp_mesh.h), for jobs started without an MPI launcher (torchrun, srun without an MPI
// plugin). parallel.communicator = "tcp", or "auto" for such CPU ranks.
//
// Sums are deterministic and the same bits on every rank: a small buffer goes to every
// rank and each adds the ranks' values in rank order; a large float buffer is summed by the
// ring (algorithms/ring.h: reduce-scatter, then all-gather of the summed segments), a large
// double buffer by a reduce-scatter that adds in rank order and an all-gather. The
// reduce-scatter adds in rank order too. parallel.allreduce = "ring" or "hierarchical" picks
// those algorithms for every float sum.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/parallel/algorithms/allreduce_choice.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {

class Store;

struct TcpOptions {
  double timeout_s = 300;  // a wait on a peer with no data moving this long fails, naming it
  algorithms::AllreduceSetting setting;
  std::string advertise = "127.0.0.1";  // how the other ranks reach this one
};

// Collective over `world` ranks that share `store` (its keys under `prefix`): this rank's
// communicator. A world of one needs no store (null). The communicator and every group
// split from it hold the store (rank 0's serves the others) until the last of them goes.
std::unique_ptr<Communicator> make_tcp_communicator(std::shared_ptr<Store> store,
                                                    const std::string& prefix, int rank,
                                                    int world, const TcpOptions& options);

// Buffers up to this many bytes per peer are summed by sending them to every rank.
inline constexpr int64_t kTcpSmallSumBytes = int64_t{1} << 20;

}  // namespace aiscale::parallel
