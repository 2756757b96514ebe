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
  // Ends every rank at once (a rank that cannot go on must not leave the others waiting).
  virtual void abort(int code) = 0;
};

// One rank, no communication.
std::unique_ptr<Communicator> make_single_process();
// "auto": MPI when the process was launched as one of several ranks (mpirun, srun,
// aiscale launch), else a single process; "mpi" forces MPI; "none" a single process.
std::unique_ptr<Communicator> make_communicator(const std::string& kind = "auto");
// Ranks announced by the launcher's environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// SLURM_NTASKS), 1 when none.
int launched_world_size();

}  // namespace aiscale::parallel
