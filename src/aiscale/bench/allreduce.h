// The all-reduce benchmark (`aiscale bench allreduce`): in-place fp32 sum over message
// sizes, reporting time, algorithm bandwidth and bus bandwidth as nccl-tests defines
// them (busbw = algbw * 2(n-1)/n: the bytes each rank's links carry in a ring
// all-reduce, comparable across world sizes and with the links' peak).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"

namespace aiscale::bench {

struct AllreduceBenchOptions {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t step_factor = 2;  // sizes min, min*f, min*f^2, ... up to max
  int64_t iters = 20;       // timed all-reduces per size
  int64_t warmup = 5;       // untimed all-reduces per size first
  int64_t repeats = 3;      // timed loops of `iters` per size; the median loop counts
  std::string backend = "nccl";  // nccl (device buffers), mpi or tcp (host buffers)
  std::string system;       // machine name for the record ("" = $SLURM_CLUSTER_NAME if set)
  int64_t nodes = 0;        // nodes for the record (0 = $SLURM_JOB_NUM_NODES if set)
  bool check = true;        // verify one all-reduce per size against the exact sum
  // The communicator's all-reduce algorithm (parallel.allreduce; the communicator must
  // have been made with it): library, ring or hierarchical (MPI or NCCL), for the record.
  std::string algorithm = "library";
  int64_t ranks_per_node = 0;  // hierarchical: forced ranks per node (0: the real nodes)
};

// The message sizes in bytes (multiples of 4, fp32). Throws Error for a bad range or an
// algorithm the backend cannot run (called before any set-up).
std::vector<int64_t> allreduce_bench_sizes(const AllreduceBenchOptions& o);

// Runs the benchmark on every rank (the communicator must match o.backend) and calls
// on_result with one record per size on rank 0, as soon as it is measured.
void run_allreduce_bench(const AllreduceBenchOptions& o, parallel::Communicator& comm,
                         const std::function<void(const nlohmann::json&)>& on_result);

}  // namespace aiscale::bench
