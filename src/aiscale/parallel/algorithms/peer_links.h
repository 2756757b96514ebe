// The point-to-point messages the hand-written all-reduce algorithms (ring.h,
// hierarchical.h) are built from: non-blocking sends and receives of floats between the
// ranks of one communicator, each completed by wait(). The MPI communicator provides
// them over its own MPI communicator (comm_mpi.cpp); the tests provide an in-process
// version over threads, so the algorithms are checked without MPI too.
#pragma once
#include <cstdint>

namespace aiscale::parallel::algorithms {

class PeerLinks {
 public:
  virtual ~PeerLinks() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Starts sending n floats to `peer`; `data` must stay untouched until wait(id) or
  // wait_all(). Messages between two ranks with the same tag arrive in the order sent.
  virtual int isend(const float* data, int64_t n, int peer, int tag) = 0;
  // Starts receiving n floats from `peer` into `data` (which must not be read or written
  // until the receive is waited for). Receives of one peer and tag match its sends in order.
  virtual int irecv(float* data, int64_t n, int peer, int tag) = 0;
  // Completes one started operation (by the id isend/irecv returned).
  virtual void wait(int id) = 0;
  // Completes every started operation; ids start again from zero afterwards.
  virtual void wait_all() = 0;
};

// Message tags of the algorithms (distinct from the pipeline stages' point-to-point tag).
inline constexpr int kRingTag = 2101;
inline constexpr int kNodeReduceTag = 2102;
inline constexpr int kNodeBroadcastTag = 2103;

}  // namespace aiscale::parallel::algorithms
