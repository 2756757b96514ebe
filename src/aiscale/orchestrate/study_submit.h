// Submitting a scaling study to Slurm: one sbatch script per point that is neither
// finished nor queued or running, submitted as a dependency chain (afterany: one point
// at a time, whatever the previous one's outcome) or as job arrays (one per rank count).
// The job ids go to STUDY/slurm.json. If any sbatch fails, the jobs submitted so far in
// this call are cancelled and the study is left as it was. `aiscale scale --scheduler
// slurm` and `aiscale slurm submit` call submit_study.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "aiscale/orchestrate/slurm_script.h"
#include "aiscale/plan/catalog.h"

namespace aiscale::orchestrate {

struct SubmitOptions {
  // Resources, site preset, launch; argv, ranks, output and chdir come from each point.
  ScriptRequest job;
  std::string mode = "chain";  // "chain" | "array"
  int array_parallel = 1;      // array tasks running at once (1: one at a time)
  bool dry_run = false;        // write the scripts under STUDY/slurm/dry-run/, submit nothing
};

struct SubmitResult {
  std::vector<std::pair<std::string, std::string>> submitted;  // point id, job id
  std::vector<std::pair<std::string, std::string>> skipped;    // point id, why
  std::vector<std::string> scripts;                            // written (absolute paths)
};

SubmitResult submit_study(const std::string& study_dir, const SubmitOptions& options,
                          const plan::Catalog* catalog);

}  // namespace aiscale::orchestrate
