// Collective communication between ranks, behind one interface: a single-process
// implementation, MPI (CPU ranks) and NCCL (GPU ranks).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace aiscale::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend() const = 0;
  // In-place sum over all ranks of n floats.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  // In-place sum of doubles (small: losses, norms, counters).
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  // Copy root's n floats to every rank.
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  virtual void broadcast_bytes(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

// One rank, no communication.
std::unique_ptr<Communicator> make_single_process();

}  // namespace aiscale::parallel
