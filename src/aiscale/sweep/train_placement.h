// Where the trials of a search over training runs go (train_search.h): the launcher (local
// processes, or srun job steps inside a Slurm allocation), the slots that run one trial at a
// time each (with their GPUs), the CPU threads of each rank, and whether the trials train on
// GPUs. Every refusal (no GPU for a trial, srun outside an allocation, more ranks than the
// allocation's tasks) comes from here, before the study directory is touched.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/tune/space.h"

namespace aiscale::sweep {

struct TrialPlacement {
  std::string launcher;                    // "local" or "srun"
  std::string device;                      // the trials' train.device: "cpu" or "cuda"
  std::vector<std::vector<int>> slot_gpus;  // per slot, its CUDA devices (empty: no GPUs)
  int64_t threads = 1;                     // CPU threads of each rank
};

TrialPlacement plan_placement(const tune::StudyConfig& c);

}  // namespace aiscale::sweep
