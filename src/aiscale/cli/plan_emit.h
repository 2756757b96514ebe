// `aiscale plan ... --emit DIR`: the chosen row of a plan as files that run it, so that a
// plan is one step from a run: DIR/train.toml (every key of the training config, the
// layout's model, batch, parallelism, precision and steps filled in) and DIR/job.sbatch
// (written by `aiscale slurm script` for the row's system and rank count, running that
// config). Transformer plans only; a row `aiscale train` cannot run is refused with the
// reason.
#pragma once
#include <string>

#include "aiscale/plan/catalog.h"
#include "aiscale/plan/planner.h"

namespace aiscale::cli {

struct EmitOptions {
  std::string dir;          // where the files go (created; existing files are replaced)
  std::string data;         // data.train of the config (a path or glob of token shards)
  std::string aiscale;      // the binary the job runs ("": this binary's absolute path)
};

// Writes the files for `row` (1-based, in ranked order) of `result`; returns a summary for
// the terminal (what was written, what to edit). Throws Error naming what cannot be emitted.
std::string emit_plan_row(const plan::PlanRequest& request, const plan::PlanResult& result, int row,
                          const plan::Catalog& catalog, const EmitOptions& options);

}  // namespace aiscale::cli
