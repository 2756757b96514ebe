// Collective communication between ranks, behind one interface: a single-process
// implementation, MPI and TCP (CPU ranks) and NCCL (GPU ranks, one process per GPU).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/core/dtype.h"

namespace aiscale::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend() const = 0;
  // True when the collectives work on device (GPU) memory without host copies (NCCL).
  // Every communicator accepts host pointers; a device communicator stages them through
  // a device buffer, and the MPI communicator of a CUDA run stages device pointers
  // through host memory.
  virtual bool on_device() const { return false; }
  // In-place sum over all ranks of n floats. On a device communicator this waits for the
  // work already queued on the GPU (any stream) before it starts, and returns when the
  // sum is complete, so a caller need not share a stream with it.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  // In-place sum of doubles (small: losses, norms, counters).
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  // Copy root's n floats to every rank.
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  virtual void broadcast_bytes(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank at once (a rank that cannot go on must not leave the others waiting).
  virtual void abort(int code) = 0;
  // --- Host collectives of the model-parallel layers (tensor parallelism, ZeRO-2/3) ---
  // All-gather: `in` holds this rank's `count` floats; `out` (world() * count) gets rank
  // r's at [r * count, (r + 1) * count). `in` and `out` must not overlap.
  virtual void allgather(const float* in, float* out, int64_t count);
  // Reduce-scatter: `in` holds world() * count floats; `out` (count) gets the sum over the
  // ranks of their part [rank() * count, (rank() + 1) * count). No overlap.
  virtual void reduce_scatter_sum(const float* in, float* out, int64_t count);
  // The all-gather started and left to complete: `in` and `out` must stay untouched until
  // wait() returns (ZeRO-3 gathers the next block while the current one computes). The
  // default runs it at once.
  virtual void allgather_async(const float* in, float* out, int64_t count) {
    allgather(in, out, count);
  }
  // Point-to-point (pipeline stages): send n floats to rank `peer` of this communicator
  // (returns without waiting for the receiver: the message is buffered; wait() completes
  // the sends in flight), and the blocking receive. Messages between two ranks arrive in
  // order.
  virtual void send(const float* data, int64_t n, int peer);
  virtual void recv(float* data, int64_t n, int peer);

  // Queued variant for benchmarks and overlap: starts an in-place sum and may return
  // before it completes; wait() completes everything queued. Unlike allreduce_sum it
  // does not wait for other streams' work: `data` must be ready when called (written
  // synchronously, or by an earlier collective of this communicator). The default runs
  // the sum at once.
  virtual void allreduce_sum_async(float* data, int64_t n) { allreduce_sum(data, n); }
  virtual void wait() {}

  // --- Device collectives ordered by CUDA events (device communicators only) ---
  // For a GPU model that overlaps communication with its own kernels. CUDA types travel
  // as void* so this header stays free of CUDA: `event` is a cudaEvent_t recorded by the
  // caller on its stream (null: no wait); the collective starts on the communicator's
  // stream once the event has completed and after everything queued there before. None
  // of them blocks the host; wait() completes them (bounded by the timeout), record()
  // marks them for a GPU-side wait (cudaStreamWaitEvent). Communicators without a device
  // stream (device_stream() == nullptr) fail on these calls.
  virtual void* device_stream() { return nullptr; }
  // In-place sum of n values of type t (f32 or bf16) at `data` (device memory).
  virtual void allreduce_sum_after(void* data, int64_t n, DType t, void* event);
  // The same, also adding the sum of squares of this rank's share of the result into the
  // device double at `sum_squares` (on the communicator's stream, ordered like the sum):
  // each value of the result is summed on exactly one rank, so the ranks' shares add up to
  // the sum of squares of the whole result (the gradient norm without a pass of its own).
  // Only where fuses_sum_squares(): a transport whose sums are its own kernels (the copy
  // engines); f32 values only.
  virtual bool fuses_sum_squares() const { return false; }
  virtual void allreduce_sum_squares_after(void* data, int64_t n, DType t, void* event,
                                           double* sum_squares);
  // In-place reduce-scatter: `data` holds world() * count values of type t; afterwards
  // rank r's summed part is at [r * count, (r + 1) * count). The rest is left undefined.
  virtual void reduce_scatter_sum_after(void* data, int64_t count, DType t, void* event);
  // In-place all-gather: rank r's `bytes` at data + r * bytes go to every rank.
  virtual void allgather_after(void* data, int64_t bytes, void* event);
  // All-gather straight to a consumer, where the transport can (the copy engines): rank r
  // pushes its `bytes` at data + r * bytes (ready at `event`) into every peer's buffer
  // beside the communicator's queued work, and the stream `consumer` (a cudaStream_t)
  // waits, without holding the host, until every peer's part has arrived here. Unlike
  // allgather_after it does not ask whether the receivers are ready: the caller guarantees
  // that no rank still uses its buffer from an earlier call (the uses are separated by a
  // host-level collective, as a training step's are) and that the buffer shares its memory
  // with nothing else a peer may be using at that time. wait() includes it. Returns false,
  // doing nothing, where the transport has no such path: then use allgather_after.
  virtual bool allgather_push(void* /*data*/, int64_t /*bytes*/, void* /*event*/,
                              void* /*consumer*/) {
    return false;
  }
  // Stream-ordered point-to-point of device memory (the hand-written GPU all-reduce
  // algorithms, parallel/nccl/device_algorithms.h): queues sending `bytes` at `data` to
  // rank `peer`, or receiving them from `peer` into `data`, on the communicator's stream
  // after the work queued there; wait() completes them. Sends and receives between two
  // ranks match in the order queued, with equal sizes. A step that both sends and receives
  // puts the pair between group_begin() and group_end() (else two ranks sending to each
  // other can wait for each other). Communicators without device point-to-point fail.
  virtual void send_after(const void* data, int64_t bytes, int peer);
  virtual void recv_after(void* data, int64_t bytes, int peer);
  // Records `event` (a cudaEvent_t) on the communicator's stream after the queued work.
  virtual void record(void* event);
  // Collectives queued between these two are launched together (one NCCL group: one
  // launch for many buckets). Default: no grouping.
  virtual void group_begin() {}
  virtual void group_end() {}

  // --- Sub-groups ---
  // Collective over every rank of this communicator: the ranks that pass the same
  // `color` (>= 0) form a new communicator, ranked by `key` (ties: by rank here); a rank
  // that passes kNoGroup joins none and gets nullptr. The result owns its resources
  // (MPI communicator, NCCL communicator, stream) and frees them when destroyed; it must
  // be destroyed before this communicator. Communicators that cannot split (the copy-engine
  // group) fail with a message naming the backend.
  static constexpr int kNoGroup = -1;
  virtual std::unique_ptr<Communicator> split(int color, int key);
};

// What a run asks of its communicator.
struct CommOptions {
  // "auto": one process unless launched as several ranks; then NCCL when device is
  // "cuda" (and aiscale was built with NCCL), else MPI under an MPI launcher and TCP
  // without one (torchrun-style RANK/WORLD_SIZE, or parallel.rendezvous file:/tcp:).
  // "mpi", "tcp", "nccl", "none" force one.
  std::string kind = "auto";
  std::string device = "cpu";  // "cpu" or "cuda": a CUDA rank also gets its node-local GPU
  // How NCCL and TCP ranks find each other: "auto" (NCCL: MPI when launched by mpirun/srun
  // with MPI; both: the TCP store at MASTER_ADDR and aiscale_store_port (launch_env.h) when
  // launched torchrun-style with RANK and WORLD_SIZE, else an error naming the fix), "mpi"
  // (NCCL only), "file:/shared/path" (rank 0 writes the NCCL id, or its TCP store's address,
  // there; ranks and world from the launcher's environment) or "tcp://host:port" (rank 0
  // serves a TCP store there).
  std::string rendezvous = "auto";
  double timeout_s = 300;  // NCCL, TCP: a collective or the set-up stalled this long fails the rank
  // parallel.allreduce: how float buffers are summed: "library" (MPI's or NCCL's own),
  // "ring" or "hierarchical" (CPU ranks: parallel/algorithms/ over MPI; GPU ranks:
  // parallel/nccl/device_algorithms.h over NCCL send/receive).
  std::string allreduce = "library";
  // parallel.ranks_per_node: the nodes of the hierarchical algorithm (0: where the ranks run).
  int ranks_per_node = 0;
};

// One rank, no communication.
std::unique_ptr<Communicator> make_single_process();
std::unique_ptr<Communicator> make_communicator(const CommOptions& options);
// "auto": MPI or TCP when the process was launched as one of several ranks (as above),
// else a single process; "mpi" or "tcp" forces one; "none" a single process.
// (CPU ranks; same as make_communicator({kind}).)
std::unique_ptr<Communicator> make_communicator(const std::string& kind = "auto");
// Ranks announced by the launcher's environment (WORLD_SIZE with RANK, OMPI_COMM_WORLD_SIZE,
// PMI_SIZE, SLURM_NTASKS), 1 when none.
int launched_world_size();
// Whether this build has the NCCL communicator.
bool nccl_compiled();

}  // namespace aiscale::parallel
