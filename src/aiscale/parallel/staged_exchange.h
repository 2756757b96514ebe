// The host side of device collectives staged through host memory (HostStaged in
// host_staged.cpp, for GPU ranks over MPI or TCP): element types summed in fp32, and the
// order of a group's point-to-point operations when a send may block until its receiver
// is there. Plain host code, unit-tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "aiscale/core/dtype.h"

namespace aiscale::parallel::staging {

// n values of type t at `in` as fp32 (f32: copied bit for bit).
void widen(DType t, const void* in, float* out, int64_t n);
// n fp32 values rounded to type t, to nearest even, once (f32: copied bit for bit).
void narrow(DType t, const float* in, void* out, int64_t n);

// One deferred point-to-point operation of a group: a send to, or a receive from, `peer`.
struct PeerOp {
  bool send = false;
  int peer = 0;
};

// The order (indices into `ops`, which are in the order queued) in which rank `rank` runs
// one group's point-to-point operations over blocking sends and receives. Peers come in
// the order of the pair (lower rank, higher rank) each forms with this rank; with one peer,
// the lower rank of the two runs its sends first and then its receives, the higher rank
// its receives first. When every rank runs its group in this order, all of them complete:
// the smallest pair not yet done has both its ranks at that pair (their smaller pairs are
// done), where the lower rank's sends meet the higher rank's receives and then the other
// way round. Sends to one peer keep their queued order, and so do receives, so messages
// between two ranks match as queued.
std::vector<size_t> point_to_point_order(int rank, const std::vector<PeerOp>& ops);

}  // namespace aiscale::parallel::staging
