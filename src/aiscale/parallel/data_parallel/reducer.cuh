// The data-parallel gradient reducer of a GPU model: sums the model's gradients over the
// ranks of a device communicator (NCCL, the copy engines of one node, or MPI or TCP staged
// through host memory: parallel/host_staged.cpp, blocking this class's thread), overlapped with
// the model's backward pass, in the spirit of PyTorch DDP's reducer fed by gradient-ready
// events. The model knows this interface, not the communicator.
//
// What the model publishes (gradient_segments.h): its flat fp32 gradient buffer and the
// order in which backward completes it (segments and the named points of backward); as
// backward passes each point it calls gradients_ready(point, stream). The reducer cuts the
// buffer into buckets (bucket_plan.h), records each bucket's ready event on the model's
// stream when its last point has passed and posts its collective to a thread of its own
// (comm_queue.h), which orders it after that event on the communicator's stream. Options:
// - grad_comm = bf16: each bucket is rounded to bf16 on the communicator's stream after its
//   ready event, summed in bf16 and widened back there;
// - grad_transport = copy-engine: the bucket collectives and the gathers below go through
//   CUDA IPC copies (parallel/cuda/copy_engine_group.h), whose sum kernels also add up the
//   squares of the sums, so the gradient norm needs no pass of its own (fp32, no ZeRO);
// - zero_stage = 1: reduce-scatter instead of all-reduce; boundaries on multiples of the
//   world size; rank r keeps the sums of the r-th part of every bucket (the sharded AdamW
//   and the all-gather of the new weights are in optim/zero1.cuh).
//
// The embeddings' gathered backward (a cooperation the GPT model asks for): the embedding
// backward would complete the largest bucket (wte, wpe) only at the very end. Instead that
// bucket is summed after the LM head, and the model calls gather_input_gradients() with its
// input gradient d(res0): every rank receives every rank's d(res0) (gather_inputs() has
// given it every rank's tokens during forward) and runs the embedding backward over all
// ranks' positions once the returned event has passed, which adds exactly the summed
// contribution to the summed embeddings. Without ZeRO the last bucket (layer 0's first
// LayerNorm) is held back until that gather is queued, so that the embedding backward runs
// beside its sum instead of after it.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/data_parallel/bucket_plan.h"
#include "aiscale/parallel/data_parallel/comm_queue.h"
#include "aiscale/parallel/data_parallel/gradient_segments.h"

namespace aiscale::profile {
class StepTimer;
class OpProfiler;
class GpuSpanRecorder;
}

namespace aiscale::parallel::dp {

struct ReducerOptions {
  int zero_stage = 0;
  bool overlap = true;  // false: one bucket after the whole backward (for measurements)
  double bucket_mib = 25;
  DType grad_comm = DType::f32;
  // "nccl", "copy-engine", or "auto": the copy engines where every rank's GPU is a Hopper
  // or newer (compute capability 9.0+) and every rank can set them up (one node, GPUs that
  // map each other's memory), else NCCL (a failed set-up with a note from rank 0). Over a
  // communicator that stages through host memory (MPI, TCP) "nccl" and "auto" take its own
  // collectives and "copy-engine" is refused.
  std::string grad_transport = "nccl";
  double timeout_s = 300;
  bool verbose = false;  // print the buckets
  // Over the copy engines (fp32, no ZeRO): the norm's squares from the sum kernels; false
  // keeps the norm's own pass (AISCALE_CUDA_FUSED_NORM=0, for measurements).
  bool fused_norm = true;
  // The model gathers its input gradients for the embedding backward
  // (gather_input_gradients, below: GPT): the last bucket is then held back until that
  // gather is queued, and the first bucket (the embeddings) gets its squares after it.
  // Models without it (the ResNets) send every bucket as its point passes.
  bool gathered_embeddings = false;
};

class Reducer final : public GradientReadyListener {
 public:
  // Null where there is nothing to reduce on the device: no communicator, one rank, or a
  // communicator without a device stream (then the trainer sums the gradients itself).
  // `timer` (may be null) receives the host's time in collectives and the buckets' times.
  static std::unique_ptr<Reducer> create(Communicator* comm, const ReducerOptions& options,
                                         const GradientOrder& order, int64_t size,
                                         profile::StepTimer* timer);
  Reducer(Communicator& comm, const ReducerOptions& options, const GradientOrder& order,
          int64_t size, profile::StepTimer* timer);
  ~Reducer() override;

  int world() const { return world_; }
  int rank() const { return rank_; }
  bool zero() const { return zero_; }
  bool overlap() const { return overlap_; }
  DType comm_type() const { return comm_t_; }
  const BucketPlan& plan() const { return plan_; }
  const std::vector<Bucket>& buckets() const { return plan_.buckets; }

  // --- memory, which the model allocates in its arena (the copy engines need one) ---
  // The bf16 copies of the buckets (0 for f32).
  size_t comm_buffer_bytes() const;
  // Doubles for the sums of squares: per bucket (ZeRO-1), per rank and one more (fused).
  size_t sum_squares_slots() const;
  // Whether gathers reach the consumer straight from the peers (copy engines): their
  // buffer must then be one of its own, see CopyEngineGroup's allgather_push.
  bool pushes_gathers() const { return options_.grad_transport == "copy-engine"; }
  // The transport the buckets take once connected: "nccl", "copy-engine", or "host" (MPI or
  // TCP staged through host memory).
  const std::string& transport_name() const { return options_.grad_transport; }
  struct Buffers {
    float* grads = nullptr;          // padded_size values
    void* comm_buffer = nullptr;     // comm_buffer_bytes()
    double* sum_squares = nullptr;   // sum_squares_slots()
    double* sum_squares_scratch = nullptr;  // cuda::sum_squares_scratch_doubles()
    double* host_sum_squares = nullptr;     // pinned, sum_squares_slots()
  };
  // Then: the buffers, the model's stream, and the arena holding them all (the copy-engine
  // transport maps it into the peers).
  void connect(const Buffers& buffers, cudaStream_t model_stream, void* arena, size_t arena_bytes);

  // --- a training step ---
  // Whether the next forward/backward pair synchronises (DDP's no_sync when off).
  void set_sync(bool on) { sync_ = on; }
  // At the start of a forward; returns whether this step synchronises.
  bool begin_step(bool training);
  // The step synchronises with overlap: the model gathers tokens and d(res0).
  bool overlapping() const { return sync_step_ && overlap_; }
  // Every rank's `bytes` at `mine` into all + rank * bytes on every rank (device), and the
  // whole into host_all (pinned) once gathered; the model reads host_all after finish().
  void gather_inputs(void* all, void* host_all, const void* mine, int64_t bytes);
  // GradientReadyListener: the buckets complete at `point` are summed.
  void gradients_ready(int point, void* stream) override;
  // The embeddings' gathered backward (see the top): `mine` is this rank's d(res0), `all`
  // world x bytes. Queues the gather (and the held-back last bucket) and makes the model's
  // stream wait until the gathered d(res0) and the summed embeddings are there.
  void gather_input_gradients(void* all, const void* mine, int64_t bytes);
  // After the model has zeroed its gradients on its stream.
  void gradients_zeroed();
  // Sum of squares of the summed gradients (of this rank's parts, added over the ranks,
  // with ZeRO-1); `size` unpadded values.
  double grad_sum_squares();
  // The model's stream waits on the GPU for every collective queued so far (the summed
  // gradients are there for what it queues next, e.g. the optimizer), and the host for
  // the calls to end (bounded by the timeout): for a step that takes no gradient norm.
  void wait_for_sums();
  // Waits (bounded by the communicator's timeout) for every queued collective.
  void finish() const;
  // The communicator's calls posted so far have been made.
  void drain() const;

  // For the optimiser's side (ZeRO-1): the transport, and that collectives were queued.
  Communicator& transport() { return *comm_; }
  void mark_pending() { pending_ = true; }

  // --profile: while `p` (null: none) records, every collective queued here (the buckets,
  // their bf16 casts, the gathers) and ZeRO-1's all-gather of the weights is a span on
  // the communicator's stream's own track, timed by CUDA events recorded around it (read
  // after the window). Call after connect(), between steps.
  void set_profiler(profile::OpProfiler* p);
  // The recorder of that track while the profiler records (ask on the stepping thread),
  // else null.
  profile::GpuSpanRecorder* recording_spans() const;

  // AISCALE_CUDA_TIMING: per bucket, when it was ready and how long its collective took.
  void collect_bucket_times(cudaEvent_t backward_start);
  void report_bucket_times() const;

 private:
  struct BucketState {
    cudaEvent_t ready = nullptr;
    cudaEvent_t cast = nullptr;  // bf16: the bucket rounded, on the communicator's stream
    cudaEvent_t done = nullptr;  // timing: end of the collective
    bool timed = false;
    bool profiled = false;  // --profile: its collective is a span (set when queued)
    double ready_ms = 0, comm_ms = 0, done_ms = 0;
    int64_t timed_steps = 0;
  };
  void send(size_t k);
  // The collective of bucket k (on the communication thread), with spans where profiled.
  void reduce_bucket(size_t k);
  // A span on the communicator's stream from now on (`after`: an event the work waits
  // for, waited for first so that the span starts with the work).
  size_t begin_span(std::string name, const char* collective, double bytes, int bucket,
                    std::string_view dtype, cudaEvent_t after);
  bool fused_norm_bucket(size_t k) const;
  // The model's stream waits (on the GPU) for the collectives queued so far.
  void stream_waits_for_sums();
  bool every_rank_hopper_or_newer();  // collective (connect's "auto")
  cudaStream_t comm_stream() const { return static_cast<cudaStream_t>(comm_->device_stream()); }
  void* comm_at(int64_t i) const;

  ReducerOptions options_;
  Communicator* comm_;  // the transport: the given communicator or copy_engine_
  std::unique_ptr<Communicator> copy_engine_;
  profile::StepTimer* timer_;
  int world_, rank_;
  bool zero_, overlap_;
  DType comm_t_;
  int64_t size_;
  BucketPlan plan_;
  std::vector<BucketState> state_;
  std::unique_ptr<CommQueue> queue_;
  std::unique_ptr<profile::GpuSpanRecorder> spans_;  // --profile only
  Buffers buf_;
  cudaStream_t stream_ = nullptr;  // the model's
  cudaEvent_t inputs_ready_ = nullptr, comm_done_ = nullptr, grads_ready_ = nullptr,
              embed_done_ = nullptr;  // embed_done_: the first bucket (wte, wpe) summed
  bool sync_ = true, sync_step_ = false;
  bool last_held_ = false;  // the last bucket waits for gather_input_gradients
  mutable bool pending_ = false;
  // The gradient norm from the buckets' sums: sum_squares[r] holds rank r's share,
  // sum_squares[world] the embeddings'.
  bool fused_norm_ = false;
  int64_t n_fused_buckets_ = 0, fused_posted_ = 0;
};

}  // namespace aiscale::parallel::dp
