#include "aiscale/tune/schedule.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "aiscale/core/validate.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace aiscale::tune {

int available_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  if (const auto env = validate::env_int("OMP_NUM_THREADS", 1, validate::kMaxThreads)) return static_cast<int>(*env);
  return std::max(1, omp_get_num_procs());
}

ThreadPlan plan_threads(int64_t tasks, int threads, int64_t threads_per_task) {
  ThreadPlan p;
  threads = std::max(1, threads);
  if (threads_per_task > 0) {
    p.threads_per_task = static_cast<int>(threads_per_task);
    p.workers = std::max(1, threads / p.threads_per_task);
  } else if (tasks >= threads) {
    p.workers = threads;
    p.threads_per_task = 1;
  } else {
    p.workers = static_cast<int>(std::max<int64_t>(1, tasks));
    p.threads_per_task = std::max(1, threads / p.workers);
  }
  p.workers = static_cast<int>(std::min<int64_t>(p.workers, std::max<int64_t>(1, tasks)));
  return p;
}

void run_tasks(int64_t count, const ThreadPlan& plan, const std::function<void(int64_t, int)>& run) {
  if (count <= 0) return;
  // BLAS's thread count is process-wide: every task of this batch gets the same share.
  openblas_set_num_threads(plan.threads_per_task);
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&] {
    omp_set_num_threads(plan.threads_per_task);  // this thread's OpenMP regions
    for (;;) {
      if (stop.load()) return;
      const int64_t i = next.fetch_add(1);
      if (i >= count) return;
      try {
        run(i, plan.threads_per_task);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        stop = true;
      }
    }
  };
  const int workers = static_cast<int>(std::min<int64_t>(plan.workers, count));
  if (workers == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace aiscale::tune
