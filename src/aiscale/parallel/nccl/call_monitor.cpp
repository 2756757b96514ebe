#include "aiscale/parallel/nccl/call_monitor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "aiscale/core/log.h"

namespace aiscale::parallel {
namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

NcclCallMonitor::NcclCallMonitor(int rank, int world, double timeout_s)
    : rank_(rank), world_(world), timeout_s_(timeout_s), thread_([this] { watch(); }) {}

NcclCallMonitor::~NcclCallMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NcclCallMonitor::enter(const char* what) {
  what_.store(what, std::memory_order_relaxed);
  since_ns_.store(now_ns(), std::memory_order_release);
}

void NcclCallMonitor::watch() {
  // Checks a few times per deadline, at most every 200 ms: the fast path stays two stores.
  const auto period = std::chrono::milliseconds(
      std::max<int64_t>(10, std::min<int64_t>(200, int64_t(timeout_s_ * 1000 / 4))));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    const int64_t since = since_ns_.load(std::memory_order_acquire);
    if (since == 0) continue;
    const double waited = double(now_ns() - since) * 1e-9;
    if (waited <= timeout_s_) continue;
    log::error("rank {} of {}: the NCCL {} did not return within {:g} s: a peer rank has "
               "probably died or never started; ending this process (exit code 3) so that the "
               "launcher ends the others (raise parallel.timeout_s if the set-up or the steps "
               "are that slow)",
               rank_.load(), world_.load(), what_.load(), timeout_s_);
    std::_Exit(3);
  }
}

}  // namespace aiscale::parallel
