#include "aiscale/sweep/train_placement.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/sweep/train_trials.h"

namespace aiscale::sweep {

using namespace trials;

TrialPlacement plan_placement(const tune::StudyConfig& c) {
  TrialPlacement out;
  out.device = tune::value_text(study_value(c, "train.device"));
  const std::string& device = out.device;
  int64_t gpus_per_trial = c.train.gpus_per_trial;
  if (device == "cuda" && gpus_per_trial == 0) gpus_per_trial = c.train.ranks_per_trial;
  if (device != "cuda" && gpus_per_trial > 0)
    fail("{}: train.gpus_per_trial = {}, but the trials train on the CPU (train.device = \"{}\" in {}): set "
         "train.device = \"cuda\" in [fixed] or in the training config, or leave gpus_per_trial out",
         c.config_path, gpus_per_trial, device, c.train.config);
  const bool in_slurm = std::getenv("SLURM_JOB_ID") != nullptr;
  out.launcher = c.train.launcher == "auto" ? (in_slurm ? "srun" : "local") : c.train.launcher;
  if (out.launcher == "srun" && !in_slurm)
    fail("{}: train.launcher = \"srun\" runs the trials as job steps of a Slurm allocation, but this is "
         "not inside one (SLURM_JOB_ID is not set): submit the study with `aiscale slurm script -- tune "
         "{}`, or use launcher = \"local\"", c.config_path, c.config_path);
  const int64_t ranks = c.train.ranks_per_trial;
  int64_t parallel = c.train.parallel_trials;
  if (out.launcher == "srun") {
    const int64_t tasks = validate::env_int("SLURM_NTASKS", 1, 1 << 24).value_or(1);
    if (ranks > tasks)
      fail("{}: train.ranks_per_trial = {}, but the allocation has {} task(s) (SLURM_NTASKS): no trial "
           "fits; ask sbatch for at least {} tasks (--ntasks), or fewer ranks per trial",
           c.config_path, ranks, tasks, ranks);
    if (parallel == 0) parallel = std::max<int64_t>(1, tasks / ranks);
    out.threads = c.train.threads_per_rank > 0 ? c.train.threads_per_rank
                                               : validate::env_int("SLURM_CPUS_PER_TASK", 1, 1 << 20).value_or(1);
    out.slot_gpus.assign(static_cast<size_t>(parallel), {});
    return out;
  }
  if (gpus_per_trial > 0) {
    std::vector<int> gpus = visible_gpus();
    if (c.train.gpus >= 0) {
      if (c.train.gpus > static_cast<int64_t>(gpus.size()))
        fail("{}: train.gpus = {}, but this node shows {} GPU(s){}: lower it", c.config_path, c.train.gpus,
             gpus.size(), std::getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES)" : "");
      gpus.resize(static_cast<size_t>(c.train.gpus));
    }
    if (static_cast<int64_t>(gpus.size()) < gpus_per_trial)
      fail("{}: each trial needs {} GPU(s) (train.gpus_per_trial), but {} {} available: no trial fits; "
           "use fewer GPUs per trial or a node with more", c.config_path, gpus_per_trial, gpus.size(),
           gpus.size() == 1 ? "is" : "are");
    const int64_t fit = static_cast<int64_t>(gpus.size()) / gpus_per_trial;
    if (parallel == 0 || parallel > fit) parallel = fit;
    for (int64_t s = 0; s < parallel; ++s)
      out.slot_gpus.emplace_back(gpus.begin() + s * gpus_per_trial, gpus.begin() + (s + 1) * gpus_per_trial);
    out.threads = c.train.threads_per_rank > 0 ? c.train.threads_per_rank
                                               : std::max<int64_t>(1, cores() / (parallel * ranks));
    return out;
  }
  const int64_t n = cores();
  if (parallel == 0) parallel = std::max<int64_t>(1, n / (ranks * std::max<int64_t>(1, c.train.threads_per_rank)));
  out.threads = c.train.threads_per_rank > 0 ? c.train.threads_per_rank : std::max<int64_t>(1, n / (parallel * ranks));
  out.slot_gpus.assign(static_cast<size_t>(parallel), {});
  return out;
}

}  // namespace aiscale::sweep
