#include "aiscale/parallel/data_parallel/reducer.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/parallel/cuda/copy_engine_group.h"
#include "aiscale/profile/gpu_span_recorder.cuh"
#include "aiscale/profile/step_timer.cuh"

namespace aiscale::parallel::dp {
namespace {

// The bf16 (or other) copy of a bucket, as a span's name.
std::string cast_span_name(DType t) { return "bucket_to_" + std::string(dtype_name(t)); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::unique_ptr<Reducer> Reducer::create(Communicator* comm, const ReducerOptions& options,
                                         const GradientOrder& order, int64_t size,
                                         profile::StepTimer* timer) {
  if (!comm || comm->world() <= 1 || !comm->device_stream()) return nullptr;
  return std::make_unique<Reducer>(*comm, options, order, size, timer);
}

Reducer::Reducer(Communicator& comm, const ReducerOptions& options,
                 const GradientOrder& order, int64_t size, profile::StepTimer* timer)
    : options_(options),
      comm_(&comm),
      timer_(timer),
      world_(comm.world()),
      rank_(comm.rank()),
      zero_(options.zero_stage == 1),
      overlap_(options.overlap),
      comm_t_(options.grad_comm),
      size_(size) {
  BucketPlanOptions po;
  po.bucket_values = bucket_values_for_mib(options.bucket_mib);
  po.world = world_;
  po.shard = zero_;
  po.overlap = overlap_;
  plan_ = plan_buckets(order, size, po);
  state_.resize(plan_.buckets.size());
  for (BucketState& st : state_) {
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&st.ready, timer_ ? cudaEventDefault : cudaEventDisableTiming));
    if (comm_t_ != DType::f32) AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&st.cast, cudaEventDisableTiming));
    if (timer_) AISCALE_CUDA_CHECK(cudaEventCreate(&st.done));
  }
  for (cudaEvent_t* e : {&inputs_ready_, &comm_done_, &grads_ready_, &embed_done_})
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  int device = 0;
  AISCALE_CUDA_CHECK(cudaGetDevice(&device));
  queue_ = std::make_unique<CommQueue>([device] { cudaSetDevice(device); });
  if (options_.verbose) {
    std::fprintf(stderr, "[aiscale cuda] rank %d of %d: %zu gradient bucket(s)%s%s:", rank_,
                 world_, plan_.buckets.size(), overlap_ ? " overlapped with backward" : "",
                 zero_ ? ", ZeRO-1" : "");
    for (const Bucket& b : plan_.buckets)
      std::fprintf(stderr, " [%lld, %lld)", static_cast<long long>(b.begin),
                   static_cast<long long>(b.end));
    std::fprintf(stderr, "\n");
  }
}

Reducer::~Reducer() {
  if (pending_) {  // never let the model free memory a collective may still use
    try {
      queue_->drain();
      comm_->wait();
    } catch (const std::exception&) {
    }
  }
  queue_.reset();
  spans_.reset();
  copy_engine_.reset();  // unmaps the peers' buffers before the model frees its arena
  for (BucketState& st : state_) {
    if (st.ready) cudaEventDestroy(st.ready);
    if (st.cast) cudaEventDestroy(st.cast);
    if (st.done) cudaEventDestroy(st.done);
  }
  for (cudaEvent_t e : {inputs_ready_, comm_done_, grads_ready_, embed_done_})
    if (e) cudaEventDestroy(e);
}

size_t Reducer::comm_buffer_bytes() const {
  if (comm_t_ == DType::f32) return 0;
  return (size_t(plan_.padded_size) * dtype_size(comm_t_) + 255) / 256 * 256;
}

size_t Reducer::sum_squares_slots() const {
  return std::max<size_t>({1, plan_.buckets.size(), size_t(world_) + 1});
}

// "auto" takes the copy engines where they were measured to beat NCCL's kernels: NVLink
// H100 and H200 nodes (docs/design/defaults.md). Compute capability 9.0 or newer on every
// rank stands for that (the same verdict on every rank: a host-side sum over them).
bool Reducer::every_rank_hopper_or_newer() {
  int device = 0, major = 0;
  AISCALE_CUDA_CHECK(cudaGetDevice(&device));
  AISCALE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  double older = major >= 9 ? 0.0 : 1.0;
  comm_->allreduce_sum(&older, 1);
  return older == 0.0;
}

void Reducer::connect(const Buffers& buffers, cudaStream_t model_stream, void* arena,
                      size_t arena_bytes) {
  buf_ = buffers;
  stream_ = model_stream;
  if (!comm_->on_device()) {
    // MPI or TCP staging through host memory (parallel/host_staged.cpp), alike on every
    // rank: the buckets take the communicator's own collectives; the copy engines, which
    // map the peers' GPU memory beside NCCL ranks of one GPU each, are never taken.
    if (options_.grad_transport == "copy-engine")
      throw Error("parallel.grad_transport = \"copy-engine\" moves the gradients beside NCCL; the " +
                  comm_->backend() + " communicator stages through host memory: use "
                  "parallel.grad_transport = \"nccl\" or \"auto\", or parallel.communicator = "
                  "\"nccl\"");
    options_.grad_transport = "host";
  } else if (options_.grad_transport == "auto" && !every_rank_hopper_or_newer()) {
    options_.grad_transport = "nccl";
  } else if (options_.grad_transport == "copy-engine" || options_.grad_transport == "auto") {
    // Buckets and gathers through the copy engines (CUDA IPC) instead of NCCL's kernels;
    // host-side collectives stay on the given communicator.
    int64_t largest = 0;
    for (const Bucket& b : plan_.buckets) largest = std::max(largest, b.size());
    CopyEngineGroupOptions o;
    o.arena = arena;
    o.arena_bytes = arena_bytes;
    o.staging_bytes = size_t(2 * largest + 64 * world_) * dtype_size(comm_t_);
    o.timeout_s = options_.timeout_s;
    try {
      copy_engine_ = make_copy_engine_group(*comm_, o);
      comm_ = copy_engine_.get();
      options_.grad_transport = "copy-engine";
    } catch (const std::exception& e) {
      // The set-up agrees over all ranks (every rank throws, or none), so all of them
      // fall back together.
      if (options_.grad_transport != "auto") throw;
      if (rank_ == 0)
        std::fprintf(stderr, "note: parallel.grad_transport = \"auto\": NCCL carries the gradient "
                     "buckets; the copy engines could not be set up: %s\n", e.what());
      options_.grad_transport = "nccl";
    }
  }
  // The gradient norm out of the buckets' sums where the transport sums with its own
  // kernels (the copy engines): without ZeRO, in fp32 (options.fused_norm off keeps the
  // norm's own pass over the buffer, for measurements).
  fused_norm_ = !zero_ && comm_t_ == DType::f32 && comm_->fuses_sum_squares() &&
                options_.fused_norm;
  n_fused_buckets_ = 0;
  for (size_t k = 0; k < plan_.buckets.size(); ++k) n_fused_buckets_ += fused_norm_bucket(k) ? 1 : 0;
  if (n_fused_buckets_ == 0) fused_norm_ = false;
}

bool Reducer::begin_step(bool training) {
  sync_step_ = sync_ && training;
  return sync_step_;
}

void* Reducer::comm_at(int64_t i) const {
  return static_cast<char*>(buf_.comm_buffer) + i * int64_t(dtype_size(comm_t_));
}

// Adds its squares to this rank's share of the gradient norm as it is summed: every
// bucket where the norm is fused, except (overlapped) the embeddings', to which the
// embedding backward adds after their sum.
bool Reducer::fused_norm_bucket(size_t k) const {
  return fused_norm_ && !(overlap_ && options_.gathered_embeddings && k == 0);
}

void Reducer::gather_inputs(void* all, void* host_all, const void* mine, int64_t bytes) {
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(all) + rank_ * bytes, mine, size_t(bytes),
                                     cudaMemcpyDeviceToDevice, stream_));
  AISCALE_CUDA_CHECK(cudaEventRecord(inputs_ready_, stream_));
  profile::GpuSpanRecorder* rec = recording_spans();
  const size_t span = rec ? begin_span("allgather_inputs", "allgather", double(world_ * bytes), -1,
                                       "int32", inputs_ready_)
                          : 0;
  comm_->allgather_after(all, bytes, inputs_ready_);
  if (rec) rec->end(span);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(host_all, all, size_t(world_ * bytes), cudaMemcpyDeviceToHost,
                                     comm_stream()));
  pending_ = true;
}

void Reducer::gradients_ready(int point, void* stream) {
  if (!sync_step_) return;
  (void)stream;  // the model's stream, given at connect()
  for (size_t k = 0; k < plan_.buckets.size(); ++k) {
    if (plan_.buckets[k].point != point) continue;
    // Without ZeRO the last bucket waits until the d(res0) gather is queued, so that the
    // embedding backward overlaps its sum instead of following it.
    if (options_.gathered_embeddings && overlap_ && !zero_ && k + 1 == plan_.buckets.size()) {
      last_held_ = true;
      continue;
    }
    send(k);
  }
}

// Queues bucket k's collective after its ready event on the model's stream.
void Reducer::send(size_t k) {
  BucketState& st = state_[k];
  AISCALE_CUDA_CHECK(cudaEventRecord(st.ready, stream_));
  st.profiled = spans_ && spans_->recording();  // read by the task (after the queue's lock)
  queue_->post([this, k] { reduce_bucket(k); });  // two words: std::function stores them in place
  st.timed = timer_ && timer_->in_backward();
  if (fused_norm_bucket(k)) ++fused_posted_;
  pending_ = true;
}

size_t Reducer::begin_span(std::string name, const char* collective, double bytes, int bucket,
                           std::string_view dtype, cudaEvent_t after) {
  if (after) AISCALE_CUDA_CHECK(cudaStreamWaitEvent(spans_->stream(), after, 0));
  profile::Span what;
  what.name = std::move(name);
  what.kind = profile::SpanKind::comm;
  what.bytes = bytes;
  what.bucket = bucket;
  what.dtype = std::string(dtype);
  what.collective = collective;
  if (options_.grad_transport == "copy-engine" && what.collective.rfind("cast", 0) != 0)
    what.collective += " (copy engines)";
  return spans_->begin(std::move(what));
}

void Reducer::reduce_bucket(size_t k) {
  const Bucket& b = plan_.buckets[k];
  const BucketState& s = state_[k];
  profile::GpuSpanRecorder* rec = s.profiled ? spans_.get() : nullptr;
  const int bucket = static_cast<int>(k);
  const double es = double(dtype_size(comm_t_));
  // bf16: rounded on the communicator's stream after the bucket is ready (beside
  // backward's kernels, not in their way), summed, widened back there (for ZeRO-1 only
  // this rank's part, the only one it reads).
  const bool cast = comm_t_ != DType::f32;
  void* data = cast ? comm_at(b.begin) : static_cast<void*>(buf_.grads + b.begin);
  cudaEvent_t after = s.ready;
  if (cast) {
    cudaStream_t cs = comm_stream();
    AISCALE_CUDA_CHECK(cudaStreamWaitEvent(cs, s.ready, 0));
    const size_t span = rec ? begin_span(cast_span_name(comm_t_), "cast",
                                         double(b.size()) * (4 + es), bucket,
                                         dtype_name(comm_t_), nullptr)
                            : 0;
    cuda::cast_from_f32(comm_t_, data, buf_.grads + b.begin, b.size(), cs);
    if (rec) rec->end(span);
    AISCALE_CUDA_CHECK(cudaEventRecord(s.cast, cs));
    after = s.cast;
  }
  // Bytes: the whole bucket (reduce-scatter: its input), as nccl-tests' algorithm bandwidth.
  size_t span = 0;
  if (rec)
    span = begin_span(zero_ ? "reduce_scatter_bucket" : "allreduce_bucket",
                      zero_                  ? "reduce_scatter"
                      : fused_norm_bucket(k) ? "allreduce+sum_squares"
                                             : "allreduce",
                      double(b.size()) * es, bucket, dtype_name(comm_t_), after);
  if (zero_) comm_->reduce_scatter_sum_after(data, b.part, comm_t_, after);
  else if (fused_norm_bucket(k))
    comm_->allreduce_sum_squares_after(data, b.size(), comm_t_, after, buf_.sum_squares + rank_);
  else comm_->allreduce_sum_after(data, b.size(), comm_t_, after);
  if (rec) rec->end(span);
  if (cast) {
    const int64_t from = zero_ ? b.begin + rank_ * b.part : b.begin;
    const int64_t n = zero_ ? b.part : b.size();
    if (rec)
      span = begin_span("bucket_to_f32", "cast", double(n) * (4 + es), bucket,
                        dtype_name(comm_t_), nullptr);
    cuda::cast_to_f32(comm_t_, buf_.grads + from, comm_at(from), n, comm_stream());
    if (rec) rec->end(span);
  }
  if (s.done) comm_->record(s.done);
  if (k == 0) comm_->record(embed_done_);
}

void Reducer::gather_input_gradients(void* all, const void* mine, int64_t bytes) {
  cudaStream_t s = stream_;
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(all) + rank_ * bytes, mine, size_t(bytes),
                                     cudaMemcpyDeviceToDevice, s));
  AISCALE_CUDA_CHECK(cudaEventRecord(grads_ready_, s));
  drain();  // the buckets' calls first; then this thread calls the communicator itself
  // The copy engines push every rank's part straight to the peers and this stream waits
  // for their arrival, not for the buckets still being summed (`all` is then a buffer of
  // its own, whose readers of the previous step finished before its host-level loss
  // all-reduce). NCCL: an all-gather queued after those buckets.
  const bool pushed = comm_->allgather_push(all, bytes, grads_ready_, s);
  if (!pushed) {
    // (The pushed gather runs beside the communicator's stream: not on its track.)
    profile::GpuSpanRecorder* rec = recording_spans();
    const size_t span = rec ? begin_span("allgather_input_grads", "allgather", double(world_ * bytes),
                                         -1, "", grads_ready_)  // the model's element type
                            : 0;
    comm_->allgather_after(all, bytes, grads_ready_);
    if (rec) rec->end(span);
  }
  pending_ = true;
  // The embedding backward adds to the summed wte and wpe. Without ZeRO they lie wholly in
  // the first bucket (summed long ago: embed_done_); ZeRO-1's rounded boundaries can move
  // wpe's tail into layer 0's bucket, so then (and after a queued all-gather) it follows
  // everything queued so far. Without ZeRO, layer 0's bucket is summed beside it.
  cudaEvent_t before_embedding = embed_done_;
  if (zero_ || !pushed) {
    comm_->record(comm_done_);
    before_embedding = comm_done_;
  }
  if (last_held_) {
    last_held_ = false;
    send(plan_.buckets.size() - 1);
  }
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(s, before_embedding, 0));
}

void Reducer::gradients_zeroed() {
  if (!fused_norm_) return;
  // This rank's share of the squares; the buckets' sums wait for events after this.
  AISCALE_CUDA_CHECK(cudaMemsetAsync(buf_.sum_squares + rank_, 0, 8, stream_));
  fused_posted_ = 0;
}

double Reducer::grad_sum_squares() {
  double* sumsq = buf_.sum_squares;
  size_t parts = 1;  // the squares land in sum_squares[0, parts) and add up on the host
  if (fused_norm_ && fused_posted_ == n_fused_buckets_) {
    // Every bucket of this step summed once since zero_grad, adding its squares: the ranks'
    // shares, gathered, and the embeddings' own (they change after their sum).
    drain();
    comm_->allgather_after(sumsq, 8, nullptr);
    comm_->record(comm_done_);
    const bool embeddings_apart = overlap_ && options_.gathered_embeddings;
    parts = size_t(world_) + (embeddings_apart ? 1 : 0);
    if (embeddings_apart)
      cuda::sum_squares(sumsq + world_, buf_.grads, plan_.buckets.front().end,
                        buf_.sum_squares_scratch, stream_);
    AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
  } else {
    // The norm kernels follow the last collective on the GPU (an event), not after the
    // host has seen the collectives end; the host's wait stays bounded (finish).
    stream_waits_for_sums();
    // Without ZeRO every rank holds all the sums; with ZeRO-1 this rank's parts hold them
    // and the squares of all parts add over ranks.
    if (!zero_) {
      cuda::sum_squares(sumsq, buf_.grads, size_, buf_.sum_squares_scratch, stream_);
    } else {
      parts = plan_.buckets.size();
      for (size_t k = 0; k < parts; ++k) {
        const Bucket& b = plan_.buckets[k];
        cuda::sum_squares(sumsq + k, buf_.grads + b.begin + rank_ * b.part, b.part,
                          buf_.sum_squares_scratch, stream_);
      }
    }
  }
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(buf_.host_sum_squares, sumsq, parts * 8,
                                     cudaMemcpyDeviceToHost, stream_));
  finish();
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double total = 0.0;
  for (size_t k = 0; k < parts; ++k) total += buf_.host_sum_squares[k];
  if (zero_) comm_->allreduce_sum(&total, 1);
  return total;
}

void Reducer::stream_waits_for_sums() {
  if (!pending_) return;
  drain();
  comm_->record(comm_done_);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
}

void Reducer::wait_for_sums() {
  stream_waits_for_sums();
  finish();
}

void Reducer::set_profiler(profile::OpProfiler* p) {
  queue_->drain();  // no task may still use the recorder being replaced
  spans_.reset();
  if (p)
    spans_ = std::make_unique<profile::GpuSpanRecorder>(*p, comm_stream(), profile::kGpuCommTrack,
                                                        "GPU: communicator stream");
}

profile::GpuSpanRecorder* Reducer::recording_spans() const {
  return spans_ && spans_->recording() ? spans_.get() : nullptr;
}

void Reducer::drain() const {
  const auto start = std::chrono::steady_clock::now();
  queue_->drain();
  if (timer_) timer_->add_host_comm(seconds_since(start));
}

void Reducer::finish() const {
  if (!pending_) return;
  drain();
  const auto start = std::chrono::steady_clock::now();
  comm_->wait();
  pending_ = false;
  if (timer_) timer_->add_host_wait(seconds_since(start));
}

void Reducer::collect_bucket_times(cudaEvent_t backward_start) {
  // Per bucket: when it was ready (from the start of backward), and how long its
  // collective took from the later of its readiness and the previous collective's end.
  float prev_done = 0.0f;
  for (BucketState& st : state_) {
    if (!st.timed) continue;
    st.timed = false;
    float ready = 0.0f, done = 0.0f;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ready, backward_start, st.ready));
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&done, backward_start, st.done));
    st.ready_ms += ready;
    st.comm_ms += done - std::max(ready, prev_done);
    st.done_ms += done;
    ++st.timed_steps;
    prev_done = done;
  }
}

void Reducer::report_bucket_times() const {
  for (size_t k = 0; k < state_.size(); ++k) {
    const BucketState& st = state_[k];
    const Bucket& b = plan_.buckets[k];
    if (st.timed_steps == 0) continue;
    const double kb = 1.0 / double(st.timed_steps);
    std::fprintf(stderr,
                 "[aiscale cuda] rank %lld: bucket [%lld, %lld) %.1f MB: ready at %.3f ms "
                 "into backward, collective %.3f ms, done at %.3f ms\n",
                 static_cast<long long>(rank_), static_cast<long long>(b.begin),
                 static_cast<long long>(b.end),
                 double(b.size()) * double(dtype_size(comm_t_)) / 1e6, st.ready_ms * kb,
                 st.comm_ms * kb, st.done_ms * kb);
  }
}

}  // namespace aiscale::parallel::dp
