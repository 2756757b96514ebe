// Runs a communicator's calls on a thread of their own, in order. An NCCL call can hold
// its caller until the GPU reaches the event it is ordered after; on the model's thread
// that would keep the host from queueing the next layers' kernels (the GPU then idles at
// every bucket). The model's thread only records events and posts; it drains the queue
// before it touches the communicator itself or waits on an event the worker records.
//
// Included by CUDA sources (C++17).
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace aiscale::parallel::dp {

class CommQueue {
 public:
  // on_start runs first on the worker thread (e.g. selecting the CUDA device).
  explicit CommQueue(std::function<void()> on_start);
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  void post(std::function<void()> task);
  // Returns once every posted task has run; rethrows the first failure (after which the
  // remaining tasks were skipped).
  void drain();

 private:
  void run(const std::function<void()>& on_start);

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
};

}  // namespace aiscale::parallel::dp
