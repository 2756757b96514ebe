// Running many small training tasks on one node's cores: one task per thread when there
// are at least as many tasks as threads, else several threads per task (OpenMP and BLAS
// inside the MLP, nthread inside XGBoost), unless the user fixes threads per task.
#pragma once
#include <cstdint>
#include <functional>

namespace aiscale::tune {

struct ThreadPlan {
  int workers = 1;           // tasks that run at the same time
  int threads_per_task = 1;  // CPU threads each of them uses
};

// The threads this rank may use: `configured` when > 0, else OMP_NUM_THREADS when set
// (aiscale launch and mpirun -x set it per rank), else every core.
int available_threads(int64_t configured);
// tasks >= threads: threads workers of 1 thread; fewer tasks: one worker per task, the
// threads shared out among them. threads_per_task > 0 forces that many per task.
ThreadPlan plan_threads(int64_t tasks, int threads, int64_t threads_per_task);

// Calls run(index, threads_per_task) for every index in [0, count) on plan.workers
// threads. The first exception stops the hand-out of further tasks and is rethrown here
// once the running ones have finished.
void run_tasks(int64_t count, const ThreadPlan& plan, const std::function<void(int64_t, int)>& run);

}  // namespace aiscale::tune
