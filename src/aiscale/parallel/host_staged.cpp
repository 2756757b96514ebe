// A host communicator (MPI, TCP) for GPU ranks, staging device memory through host memory,
// in the spirit of PyTorch's gloo backend with CUDA tensors. Two halves of comm.h:
// - the host collectives given device pointers copy them to the host after all the GPU's
//   queued work, run the inner collective and copy back, returning when done;
// - the device collectives (all-reduce, reduce-scatter, all-gather, point-to-point, ordered
//   by CUDA events) run on a non-blocking stream of the communicator's own: each waits
//   there for the caller's event, copies to pinned host memory, runs the inner host
//   collective and queues the copy back on that stream, so record() and wait() order the
//   model's work after them as they would NCCL's. The calling thread is held meanwhile:
//   this is the path that runs every GPU layout anywhere (no NCCL, a broken NCCL, several
//   ranks sharing one GPU, which NCCL refuses), not the fast one.
// bf16 and fp16 values are summed in fp32 on the host and rounded once. All-gathers move
// bytes untouched (broadcasts, never a float sum). A group's point-to-point operations wait
// for group_end() and then run in the order of staged_exchange.h, in which blocking sends
// and receives of ranks exchanging with each other cannot wait for each other in a cycle.
//
// Threads: the gradient reducer calls the device collectives from a thread of its own
// (data_parallel/comm_queue.h) while the model's thread may call other communicators
// (tensor, pipeline groups); every call holds the communicator's lock, and no call holds
// it while it waits for another communicator. Over MPI with MPI_THREAD_MULTIPLE and over
// TCP (each group its own connections) each communicator has a lock of its own; where MPI
// allows one calling thread at a time (MPI_THREAD_SERIALIZED) all of them share one, and
// the reducer's queue being drained before the model's thread calls a communicator
// (comm_queue.h) keeps the two threads from waiting for each other's peers.
//
// on_device() stays false: the collectives do go through host memory. Its readers (the
// ResNet's overlapped all-reduce, bench allreduce, bench machine) ask for sums made on the
// device and take their host paths here.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/staged_exchange.h"

#ifdef AISCALE_HAVE_CUDA
#include "aiscale/parallel/cuda_check.h"
#endif

namespace aiscale::parallel {

#ifdef AISCALE_HAVE_CUDA
namespace {

bool is_device(const void* p) { return cuda_is_device_pointer(p); }

std::mutex& process_lock() {
  static std::mutex m;
  return m;
}

// Broadcasts of an all-gather go in pieces that MPI's int counts hold.
constexpr int64_t kPieceBytes = int64_t{1} << 30;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

class HostStaged final : public Communicator {
 public:
  // On the current device (the rank's GPU).
  HostStaged(std::unique_ptr<Communicator> inner, bool one_lock)
      : inner_(std::move(inner)), one_lock_(one_lock), lock_(one_lock ? process_lock() : own_lock_) {
    cuda_check(cudaGetDevice(&device_), "query of the current device");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream creation");
  }
  ~HostStaged() override {
    // Copies still queued read the pinned buffer: they finish first (errors are ignored:
    // a failing run is ending anyway).
    if (stream_) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    if (pinned_) (void)cudaFreeHost(pinned_);
    (void)cudaGetLastError();
  }

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend() + "+host-staging"; }

  // --- host collectives (device pointers staged, returning when complete) ---
  void allreduce_sum(float* d, int64_t n) override { staged_sum(d, n); }
  void allreduce_sum(double* d, int64_t n) override { staged_sum(d, n); }
  void broadcast(float* d, int64_t n, int root) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(d)) return inner_->broadcast(d, n, root);
    auto* h = reinterpret_cast<float*>(stage_in(d, n * 4));
    inner_->broadcast(h, n, root);
    stage_out(d, h, n * 4);
  }
  void broadcast_bytes(void* d, int64_t bytes, int root) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(d)) return inner_->broadcast_bytes(d, bytes, root);
    void* h = stage_in(d, bytes);
    inner_->broadcast_bytes(h, bytes, root);
    stage_out(d, h, bytes);
  }
  void allgather(const float* in, float* out, int64_t count) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(in) && !is_device(out)) return inner_->allgather(in, out, count);
    gather_staged(in, out, count);
  }
  void allgather_async(const float* in, float* out, int64_t count) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(in) && !is_device(out)) return inner_->allgather_async(in, out, count);
    gather_staged(in, out, count);
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t count) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(in) && !is_device(out)) return inner_->reduce_scatter_sum(in, out, count);
    std::vector<float> hin(static_cast<size_t>(world() * count)), hout(static_cast<size_t>(count));
    copy_settled(hin.data(), in, hin.size() * 4);
    inner_->reduce_scatter_sum(hin.data(), hout.data(), count);
    copy_settled(out, hout.data(), hout.size() * 4);
  }
  void send(const float* d, int64_t n, int peer) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(d)) return inner_->send(d, n, peer);
    std::vector<float> h(static_cast<size_t>(n));
    copy_settled(h.data(), d, h.size() * 4);
    inner_->send(h.data(), n, peer);  // buffered: h may go
  }
  void recv(float* d, int64_t n, int peer) override {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(d)) return inner_->recv(d, n, peer);
    std::vector<float> h(static_cast<size_t>(n));
    inner_->recv(h.data(), n, peer);
    copy_settled(d, h.data(), h.size() * 4);
  }
  void barrier() override {
    std::lock_guard<std::mutex> hold(lock_);
    inner_->barrier();
  }
  // No lock: a rank that cannot go on ends the job even while a collective is stuck.
  void abort(int code) override { inner_->abort(code); }
  // The device collectives' copies back, and the inner communicator's sends in flight.
  void wait() override {
    std::lock_guard<std::mutex> hold(lock_);
    use_device();
    cuda_check(cudaStreamSynchronize(stream_), "wait for the staged copies");
    inner_->wait();
  }

  // --- device collectives on the communicator's stream ---
  void* device_stream() override { return stream_; }
  void allreduce_sum_after(void* d, int64_t n, DType t, void* event) override {
    if (n <= 0) return;
    std::lock_guard<std::mutex> hold(lock_);
    const int64_t bytes = n * int64_t(dtype_size(t));
    char* h = pinned(bytes);
    fetch(h, d, bytes, event);
    float* sums = reinterpret_cast<float*>(h);
    if (t != DType::f32) {
      sums = wide(n);
      staging::widen(t, h, sums, n);
    }
    inner_->allreduce_sum(sums, n);
    if (t != DType::f32) staging::narrow(t, sums, h, n);
    put(d, h, bytes);
  }
  void reduce_scatter_sum_after(void* d, int64_t count, DType t, void* event) override {
    if (count <= 0) return;
    std::lock_guard<std::mutex> hold(lock_);
    const int64_t all = int64_t(world()) * count, es = int64_t(dtype_size(t));
    // fp32: the parts and this rank's sum side by side in the pinned buffer; else the
    // parts widened beside it, this rank's sum rounded back into its start.
    char* h = pinned(t == DType::f32 ? (all + count) * 4 : all * es);
    fetch(h, d, all * es, event);
    float* in = reinterpret_cast<float*>(h);
    if (t != DType::f32) {
      in = wide(all + count);
      staging::widen(t, h, in, all);
    }
    float* mine = in + all;
    inner_->reduce_scatter_sum(in, mine, count);
    const char* back = reinterpret_cast<const char*>(mine);
    if (t != DType::f32) {
      staging::narrow(t, mine, h, count);
      back = h;
    }
    put(static_cast<char*>(d) + int64_t(rank()) * count * es, back, count * es);
  }
  void allgather_after(void* d, int64_t bytes, void* event) override {
    if (bytes <= 0) return;
    std::lock_guard<std::mutex> hold(lock_);
    const int64_t w = world(), r = rank();
    char* dev = static_cast<char*>(d);
    char* h = pinned(w * bytes);
    fetch(h + r * bytes, dev + r * bytes, bytes, event);
    for (int root = 0; root < w; ++root)
      for (int64_t off = 0; off < bytes; off += kPieceBytes)
        inner_->broadcast_bytes(h + root * bytes + off, std::min(kPieceBytes, bytes - off), root);
    // The other ranks' parts only: this rank's own stays as it was (NCCL's in-place
    // all-gather leaves it alone too, and a reader may be at it).
    if (r > 0) put(dev, h, r * bytes);
    if (r + 1 < w) put(dev + (r + 1) * bytes, h + (r + 1) * bytes, (w - r - 1) * bytes);
  }
  void send_after(const void* d, int64_t bytes, int peer) override {
    queue_point_to_point(true, const_cast<void*>(d), bytes, peer);
  }
  void recv_after(void* d, int64_t bytes, int peer) override {
    queue_point_to_point(false, d, bytes, peer);
  }
  void group_begin() override {
    std::lock_guard<std::mutex> hold(lock_);
    ++group_depth_;
  }
  void group_end() override {
    std::lock_guard<std::mutex> hold(lock_);
    if (group_depth_ == 0) fail("internal: group_end() without group_begin() on the {} communicator", backend());
    if (--group_depth_ == 0) run_point_to_point();
  }
  void record(void* event) override {
    std::lock_guard<std::mutex> hold(lock_);
    use_device();
    cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_), "event record");
  }

  // The group stages alike, with a stream of its own.
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub;
    {
      std::lock_guard<std::mutex> hold(lock_);
      sub = inner_->split(color, key);
    }
    if (!sub) return nullptr;
    use_device();
    return std::make_unique<HostStaged>(std::move(sub), one_lock_);
  }

 private:
  template <typename T>
  void staged_sum(T* d, int64_t n) {
    std::lock_guard<std::mutex> hold(lock_);
    if (!is_device(d)) return inner_->allreduce_sum(d, n);
    auto* h = reinterpret_cast<T*>(stage_in(d, n * int64_t(sizeof(T))));
    inner_->allreduce_sum(h, n);
    stage_out(d, h, n * int64_t(sizeof(T)));
  }

  struct PointToPoint {
    bool send = false;
    char* device = nullptr;
    int64_t bytes = 0;
    int peer = 0;
  };

  // The thread may be the reducer's (it selects the device once) or the model's.
  void use_device() const { cuda_check(cudaSetDevice(device_), "device selection"); }

  // Host collectives: `bytes` of device memory into the host buffer after all the work
  // queued on the device (the producer may be on any stream), and back, landed when the
  // call returns.
  void* stage_in(const void* d, int64_t bytes) {
    host_.resize(static_cast<size_t>((bytes + 7) / 8));
    copy_settled(host_.data(), d, static_cast<size_t>(bytes));
    return host_.data();
  }
  void stage_out(void* d, const void* h, int64_t bytes) { copy_settled(d, h, static_cast<size_t>(bytes)); }
  void copy_settled(void* to, const void* from, size_t bytes) {
    use_device();
    cuda_check(cudaDeviceSynchronize(), "synchronize before staging");
    cuda_check(cudaMemcpy(to, from, bytes, cudaMemcpyDefault), "staging copy");
    cuda_check(cudaDeviceSynchronize(), "synchronize after staging");
  }
  void gather_staged(const float* in, float* out, int64_t count) {
    std::vector<float> hin(static_cast<size_t>(count)), hout(static_cast<size_t>(world() * count));
    copy_settled(hin.data(), in, hin.size() * 4);
    inner_->allgather(hin.data(), hout.data(), count);
    copy_settled(out, hout.data(), hout.size() * 4);
  }

  // The pinned buffer of the device collectives, at least `bytes`. Every user settles the
  // stream before it writes there on the host, so a copy back still queued from the
  // previous collective has read it by then; a larger buffer waits for them too.
  char* pinned(int64_t bytes) {
    if (bytes > pinned_bytes_) {
      use_device();
      cuda_check(cudaStreamSynchronize(stream_), "wait for the staged copies");
      if (pinned_) cuda_check(cudaFreeHost(pinned_), "release of the pinned staging buffer");
      pinned_ = nullptr;
      pinned_bytes_ = 0;
      const int64_t size = round_up(bytes, int64_t{1} << 20);
      if (cudaMallocHost(reinterpret_cast<void**>(&pinned_), static_cast<size_t>(size)) != cudaSuccess) {
        (void)cudaGetLastError();
        fail("rank {}: cannot pin {} MiB of host memory to stage the {} communicator's GPU "
             "collectives: free host memory (fewer ranks per node), or use parallel.communicator "
             "= \"nccl\"", rank(), size >> 20, inner_->backend());
      }
      pinned_bytes_ = size;
    }
    return pinned_;
  }
  float* wide(int64_t n) {
    if (static_cast<int64_t>(wide_.size()) < n) wide_.resize(static_cast<size_t>(n));
    return wide_.data();
  }
  // `bytes` at device `d` into host `h` once `event` (null: nothing more) and the work
  // queued on the stream have completed; returns with the copy done.
  void fetch(char* h, const void* d, int64_t bytes, void* event) {
    use_device();
    if (event)
      cuda_check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event), 0), "wait for an event");
    cuda_check(cudaMemcpyAsync(h, d, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
               "copy to the host");
    cuda_check(cudaStreamSynchronize(stream_), "wait for the copy to the host");
  }
  // Host `h` (the pinned buffer) to device `d`, queued on the stream.
  void put(void* d, const char* h, int64_t bytes) {
    cuda_check(cudaMemcpyAsync(d, h, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_),
               "copy to the device");
  }

  void queue_point_to_point(bool send, void* d, int64_t bytes, int peer) {
    if (peer < 0 || peer >= world() || peer == rank())
      fail("internal: rank {} of {} cannot {} rank {}", rank(), world(),
           send ? "send to" : "receive from", peer);
    if (bytes <= 0) return;
    std::lock_guard<std::mutex> hold(lock_);
    pending_.push_back({send, static_cast<char*>(d), bytes, peer});
    if (group_depth_ == 0) run_point_to_point();
  }
  // The queued sends read after the work queued on the stream, every operation in the
  // order of staging::point_to_point_order over the inner communicator (whose messages
  // are floats: sizes rounded up to whole floats, alike on both sides), the received
  // bytes copied back on the stream.
  void run_point_to_point() {
    std::vector<PointToPoint> ops;
    ops.swap(pending_);
    if (ops.empty()) return;
    std::vector<int64_t> at(ops.size());
    std::vector<staging::PeerOp> peers(ops.size());
    int64_t total = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      at[i] = total;
      total += round_up(ops[i].bytes, 8);
      peers[i] = {ops[i].send, ops[i].peer};
    }
    char* h = pinned(total);
    use_device();
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].send)
        cuda_check(cudaMemcpyAsync(h + at[i], ops[i].device, static_cast<size_t>(ops[i].bytes),
                                   cudaMemcpyDeviceToHost, stream_), "copy to the host");
    cuda_check(cudaStreamSynchronize(stream_), "wait for the copies to the host");
    for (size_t i : staging::point_to_point_order(rank(), peers)) {
      PointToPoint& op = ops[i];
      auto* data = reinterpret_cast<float*>(h + at[i]);
      const int64_t floats = (op.bytes + 3) / 4;
      if (op.send) {
        std::memset(h + at[i] + op.bytes, 0, static_cast<size_t>(floats * 4 - op.bytes));
        inner_->send(data, floats, op.peer);
      } else {
        inner_->recv(data, floats, op.peer);
      }
    }
    for (size_t i = 0; i < ops.size(); ++i)
      if (!ops[i].send) put(ops[i].device, h + at[i], ops[i].bytes);
  }

  std::unique_ptr<Communicator> inner_;
  bool one_lock_;
  std::mutex own_lock_;
  std::mutex& lock_;  // own_lock_, or the process's where MPI takes one calling thread at a time
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<double> host_;  // the host collectives' staging (8-byte aligned)
  char* pinned_ = nullptr;    // the device collectives' staging
  int64_t pinned_bytes_ = 0;
  std::vector<float> wide_;   // bf16 and fp16 values widened to fp32
  int group_depth_ = 0;
  std::vector<PointToPoint> pending_;  // point-to-point operations of the open group
};

}  // namespace

std::unique_ptr<Communicator> with_host_staging(std::unique_ptr<Communicator> inner, bool one_lock) {
  return std::make_unique<HostStaged>(std::move(inner), one_lock);
}

#else  // no CUDA

std::unique_ptr<Communicator> with_host_staging(std::unique_ptr<Communicator> inner, bool) {
  return inner;
}

#endif

}  // namespace aiscale::parallel
