#include "aiscale/cli/plan_emit.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/orchestrate/slurm_script.h"
#include "aiscale/plan/time_limit.h"
#include "aiscale/train/config.h"

namespace aiscale::cli {
namespace fs = std::filesystem;

namespace {

// The training config that runs `c`: the workload's exact shape (every model field, so a
// planner-only shape such as gpt3-175b needs no preset of its own), the layout's batch,
// parallelism and recomputation, and the steps that train --tokens.
train::TrainConfig config_of(const plan::PlanRequest& r, const plan::Candidate& c, const std::string& data) {
  const plan::Workload& w = r.workload;
  const plan::Layout& l = c.layout;
  train::TrainConfig t;
  const auto presets = nn::gpt_preset_names();
  const bool named = std::find(presets.begin(), presets.end(), w.name) != presets.end();
  t.model_preset = named ? w.name : (w.gpt.llama() ? "llama-tiny" : "gpt-tiny");
  t.model = w.gpt;
  t.train_data = data;
  t.device = c.target.partition->is_cpu() ? "cpu" : "cuda";
  t.precision = plan::to_string(r.precision);
  t.seq_len = w.seq_len;
  if (l.pp > 1) {
    // A pipeline splits each rank's batch into micro-batches (parallel.microbatches): the
    // plan's micro-batch count per optimizer step.
    t.batch_size = static_cast<int64_t>(l.micro_batch) * l.grad_accum;
    t.microbatches = l.grad_accum;
    t.grad_accum = 1;
    t.pipeline_schedule = l.grad_accum >= l.pp ? "1f1b" : "gpipe";
  } else {
    t.batch_size = l.micro_batch;
    t.grad_accum = l.grad_accum;
  }
  t.tensor_parallel = l.tp;
  t.pipeline_parallel = l.pp;
  t.zero_stage = l.zero;
  t.offload_optimizer = l.offload;
  t.recompute_layers = l.recompute == plan::Recompute::full;
  t.grad_transport = l.transport == plan::GradTransport::copy_engine ? "copy-engine" : "nccl";
  const double tokens_per_step = static_cast<double>(l.global_batch()) * static_cast<double>(w.seq_len);
  t.steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(r.tokens / tokens_per_step)));
  t.warmup_steps = std::min<int64_t>(t.warmup_steps, std::max<int64_t>(0, t.steps / 10));
  return t;
}

}  // namespace

std::string emit_plan_row(const plan::PlanRequest& r, const plan::PlanResult& res, int row,
                          const plan::Catalog& cat, const EmitOptions& o) {
  if (!r.workload.is_transformer())
    fail("--emit writes training configs for transformer plans; a ResNet run is configured as "
         "docs/guide/vision.md shows");
  if (res.ranked.empty()) fail("--emit: the plan has no row to emit (see Not planned above)");
  if (row < 1 || row > static_cast<int>(res.ranked.size()))
    fail("--emit-row {} is not a row of this plan: it has {} row(s)", row, res.ranked.size());
  const plan::Candidate& c = res.ranked[static_cast<size_t>(row - 1)];
  if (!c.runs())
    fail("--emit: row {} ({} on {} GPU{}) does not run in `aiscale train`: {}; choose a row that "
         "runs (--emit-row N)", row, c.target.label(), c.layout.gpus(), c.layout.gpus() == 1 ? "" : "s",
         c.engine_gap);
  const plan::Partition& part = *c.target.partition;

  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec) fail("--emit {}: cannot create the folder ({}): choose a writable one", o.dir, ec.message());
  const fs::path dir = fs::absolute(o.dir);
  const fs::path config_path = dir / "train.toml";

  // The config as `aiscale train` will read it: checked by the same parser first.
  const train::TrainConfig t = config_of(r, c, o.data);
  const std::string header = fmt::format(
      "# Written by `aiscale plan --emit` for row {}: {} on {} {} ({}), {}.\n"
      "# Predicted: {:.0f} steps of {:.3g} s; data.train names the token shards to train on.\n",
      row, r.workload.name, c.layout.gpus(), part.is_cpu() ? "nodes" : "GPUs", c.target.label(),
      c.layout.describe(), c.steps, c.step.step_s);
  const std::string text = header + train::to_toml(t);
  train::parse_train_config(text, "the config --emit would write (" + config_path.string() + ")", {});
  atomic_write_file(config_path.string(), text);

  // The job: one rank per GPU (one per node on CPU partitions), the time limit the plan
  // predicts with a margin, within the partition's limit.
  orchestrate::ScriptRequest s;
  s.ranks = static_cast<int>(c.layout.gpus());
  s.argv = {"train", "--config", config_path.string()};
  s.aiscale = o.aiscale;
  if (s.aiscale.empty()) {  // this binary, by its absolute path (as `slurm script` does)
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    s.aiscale = ec ? "aiscale" : self.string();
  }
  s.job_name = "aiscale-" + r.workload.name;
  long limit = static_cast<long>(std::ceil(c.days * 86400.0 * 1.2)) + 600;
  std::string note;
  // Fewer ranks per node than GPUs where the node's host memory holds fewer (0: the preset's).
  s.tasks_per_node = c.layout.ranks_per_node;
  if (part.has_slurm) {
    s.system = c.target.label();
    if (!part.slurm.max_time.empty()) {
      const long max_s = plan::parse_slurm_time(part.slurm.max_time, c.target.label() + " max_time");
      if (limit > max_s) {
        note = fmt::format("the run needs about {} but {} allows {} per job: the script asks "
                           "for the limit; continue with `aiscale train --resume` in further jobs",
                           plan::format_slurm_time(limit), c.target.label(), part.slurm.max_time);
        limit = max_s;
      }
    }
  } else {
    const int per_node = c.layout.ranks_per_node > 0 ? c.layout.ranks_per_node : part.gpus_per_node;
    s.gpus_per_node = part.is_cpu() ? 0 : per_node;
    s.tasks_per_node = part.is_cpu() ? 1 : std::max(1, per_node);
    // A CPU rank is a whole node, a thread per core (as the plan assumed).
    if (const plan::CpuModel* cpu = part.is_cpu() ? cat.find_cpu(part.cpu_model) : nullptr)
      s.cpus_per_task = cpu->cores * std::max(1, part.sockets);
    note = fmt::format("{} has no Slurm preset in the catalogue: the script has no partition, "
                       "account or modules; add them (or a [system.partition.slurm] table)",
                       c.target.label());
  }
  s.time = plan::format_slurm_time(limit);
  const orchestrate::JobScript job = orchestrate::resolve_job(s, &cat);
  const fs::path script_path = dir / "job.sbatch";
  atomic_write_file(script_path.string(), orchestrate::render_sbatch(job));
  fs::permissions(script_path, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add, ec);

  std::string out = fmt::format("\nEmitted row {} ({} on {} {}):\n  {}  the training config\n  {}  "
                                "the Slurm job (sbatch {})\n",
                                row, c.target.label(), c.layout.gpus(), part.is_cpu() ? "nodes" : "GPUs",
                                config_path.string(), script_path.string(), script_path.string());
  out += fmt::format("  data.train = \"{}\": point it at your token shards (--emit-data)\n", o.data);
  if (!note.empty()) out += "  note: " + note + "\n";
  return out;
}

}  // namespace aiscale::cli
