#include "aiscale/parallel/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "aiscale/core/log.h"

namespace aiscale::parallel {
namespace {

class Watched final : public Communicator {
 public:
  Watched(std::unique_ptr<Communicator> inner, double timeout_s)
      : inner_(std::move(inner)), timeout_s_(timeout_s), thread_([this] { watch(); }) {}
  ~Watched() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend(); }
  void allreduce_sum(float* d, int64_t n) override { Guard g(this, "all-reduce"); inner_->allreduce_sum(d, n); }
  void allreduce_sum(double* d, int64_t n) override { Guard g(this, "all-reduce"); inner_->allreduce_sum(d, n); }
  void broadcast(float* d, int64_t n, int root) override { Guard g(this, "broadcast"); inner_->broadcast(d, n, root); }
  void broadcast_bytes(void* d, int64_t b, int root) override { Guard g(this, "broadcast"); inner_->broadcast_bytes(d, b, root); }
  void barrier() override { Guard g(this, "barrier"); inner_->barrier(); }
  void allgather(const float* in, float* out, int64_t n) override { Guard g(this, "all-gather"); inner_->allgather(in, out, n); }
  void allgather_async(const float* in, float* out, int64_t n) override { Guard g(this, "all-gather"); inner_->allgather_async(in, out, n); }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override { Guard g(this, "reduce-scatter"); inner_->reduce_scatter_sum(in, out, n); }
  void send(const float* d, int64_t n, int peer) override { Guard g(this, "send"); inner_->send(d, n, peer); }
  void recv(float* d, int64_t n, int peer) override { Guard g(this, "receive"); inner_->recv(d, n, peer); }
  void abort(int code) override { inner_->abort(code); }
  bool on_device() const override { return inner_->on_device(); }
  void allreduce_sum_async(float* d, int64_t n) override { Guard g(this, "all-reduce"); inner_->allreduce_sum_async(d, n); }
  void wait() override { Guard g(this, "collective"); inner_->wait(); }
  void* device_stream() override { return inner_->device_stream(); }
  // Queueing does not block for long (NCCL may connect to a peer on first use).
  void allreduce_sum_after(void* d, int64_t n, DType t, void* e) override {
    Guard g(this, "all-reduce");
    inner_->allreduce_sum_after(d, n, t, e);
  }
  void reduce_scatter_sum_after(void* d, int64_t n, DType t, void* e) override {
    Guard g(this, "reduce-scatter");
    inner_->reduce_scatter_sum_after(d, n, t, e);
  }
  void allgather_after(void* d, int64_t b, void* e) override {
    Guard g(this, "all-gather");
    inner_->allgather_after(d, b, e);
  }
  bool allgather_push(void* d, int64_t b, void* e, void* consumer) override {
    Guard g(this, "all-gather");
    return inner_->allgather_push(d, b, e, consumer);
  }
  bool fuses_sum_squares() const override { return inner_->fuses_sum_squares(); }
  void allreduce_sum_squares_after(void* d, int64_t n, DType t, void* e, double* sumsq) override {
    Guard g(this, "all-reduce");
    inner_->allreduce_sum_squares_after(d, n, t, e, sumsq);
  }
  void send_after(const void* d, int64_t b, int peer) override {
    Guard g(this, "send");
    inner_->send_after(d, b, peer);
  }
  void recv_after(void* d, int64_t b, int peer) override {
    Guard g(this, "receive");
    inner_->recv_after(d, b, peer);
  }
  void record(void* e) override { inner_->record(e); }
  // The group is watched like its parent, by a watchdog of its own.
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub;
    {
      Guard g(this, "split into sub-groups");
      sub = inner_->split(color, key);
    }
    return sub ? std::make_unique<Watched>(std::move(sub), timeout_s_) : nullptr;
  }
  void group_begin() override { inner_->group_begin(); }
  void group_end() override {
    Guard g(this, "collective group");
    inner_->group_end();
  }

 private:
  struct Guard {
    Guard(Watched* w, const char* what) : w_(w) {
      w_->what_.store(what);
      w_->since_.store(now());
    }
    ~Guard() { w_->since_.store(0.0); }
    Watched* w_;
  };
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(250));
      double since = since_.load();
      if (since > 0 && now() - since > timeout_s_) {
        log::error("rank {}: {} did not complete within {:.0f} s: a peer rank has probably died or "
                   "hangs; ending this rank (raise parallel.timeout_s if steps are that slow)",
                   inner_->rank(), what_.load(), timeout_s_);
        std::_Exit(3);
      }
    }
  }

  std::unique_ptr<Communicator> inner_;
  double timeout_s_;
  std::atomic<double> since_{0.0};
  std::atomic<const char*> what_{""};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> with_watchdog(std::unique_ptr<Communicator> inner, double timeout_s) {
  return std::make_unique<Watched>(std::move(inner), timeout_s);
}

}  // namespace aiscale::parallel
