#include "aiscale/cli/slurm_options.h"

#include <filesystem>

#include "aiscale/cli/options.h"

namespace aiscale::cli {
namespace {

// Bounds of the counts (beyond them a value is a typo): the largest machines have some
// ten thousand nodes and a few hundred cores per node.
constexpr int64_t kMaxNodes = 1000000;
constexpr int64_t kMaxRanks = int64_t{1} << 24;
constexpr int64_t kMaxPerNode = 4096;

}  // namespace

void add_job_options(CLI::App* c, JobOptions& o, bool study) {
  c->add_option("--system", o.req.system,
                "Site preset from the systems catalogue: SYSTEM or SYSTEM/PARTITION (e.g. lumi, "
                "leonardo/booster, marenostrum5); none: no preset");
  c->add_option("--partition,-p", o.req.partition, "Slurm partition (overrides the preset's)");
  c->add_option("--account,-A", o.req.account, "Slurm account (project) charged for the job");
  c->add_option("--qos,-q", o.req.qos, "Slurm QOS (overrides the preset's)");
  if (!study) {
    c->add_option("--nodes,-N", o.req.nodes, "Nodes, at least 1 (default 1)")
        ->check(integer_in(1, kMaxNodes));
    c->add_option("--ranks,-n", o.req.ranks, "Total ranks, at least 1 (default nodes x tasks per node)")
        ->check(integer_in(1, kMaxRanks));
  }
  c->add_option("--tasks-per-node", o.req.tasks_per_node,
                "Ranks per node, at least 1 (default: one per GPU of the preset, else 1)")
      ->check(integer_in(1, kMaxPerNode));
  c->add_option("--gpus-per-node", o.req.gpus_per_node,
                "GPUs per node (default: the preset's; at most the preset's); 0: a job without GPUs")
      ->check(integer_in(0, kMaxPerNode));
  c->add_option("--cpus-per-task,-c", o.req.cpus_per_task,
                "Cores per rank, at least 1 (default: the preset's cores per GPU, else 1)")
      ->check(integer_in(1, kMaxPerNode));
  c->add_option("--gpu-request", o.req.gpu_request,
                "How GPUs are asked for: gpus-per-node (--gpus-per-node=N), gres (--gres=gpu:N) "
                "or none (default: the preset's)");
  c->add_option("--cpu-bind", o.req.cpu_bind,
                "srun --cpu-bind value (default: the preset's; none: no binding)");
  c->add_flag("--exclusive,!--no-exclusive", o.exclusive,
              "Whole nodes (default: the preset's, else yes)")
      ->each([&o](const std::string&) { o.exclusive_given = true; });
  c->add_option("--time,-t", o.req.time,
                "Time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")->capture_default_str();
  c->add_option("--signal-lead", o.req.signal_lead_s,
                "Seconds before the time limit at which the ranks get SIGTERM (aiscale train "
                "checkpoints and stops); 0: no signal")->capture_default_str()->check(integer_in(0, 65535));
  c->add_option("--job-name,-J", o.req.job_name, "Job name (default: aiscale-<command or point>)");
  if (!study) {
    c->add_option("--output", o.req.output, "sbatch --output pattern (default %x-%j.out)");
    c->add_option("--chdir", o.req.chdir, "Working directory of the job");
  }
  c->add_option("--prelude", o.req.prelude,
                "Shell line run before the launch, after the preset's (repeatable), e.g. "
                "'module load cuda'");
  c->add_flag("--no-site-prelude", o.no_site_prelude, "Leave out the preset's prelude lines");
  c->add_option("--env", o.req.env, "NAME=value exported before the launch (repeatable)");
  c->add_option("--container", o.req.container,
                "Container image to run aiscale in (with the preset's container command, e.g. "
                "singularity exec --nv)");
  c->add_option("--launcher", o.req.launcher,
                "srun (one task per rank), mpirun (inside the allocation) or none (the command once, "
                "starting its own job steps: aiscale tune over training runs); default: the preset's, "
                "else srun");
  c->add_option("--srun-mpi", o.req.srun_mpi, "srun --mpi plugin (default: the preset's, else pmix)");
  c->add_option("--aiscale", o.req.aiscale,
                "The aiscale binary as the job finds it (default: this binary's absolute path; with "
                "--container, aiscale on the image's PATH)");
  c->add_option("--catalog", o.catalog_dir,
                "Directory of the systems catalogue (default: $AISCALE_SYSTEMS_DIR or data/systems)");
  c->add_option("--systems", o.system_files, "Extra catalogue file or directory (repeatable)");
}

std::unique_ptr<plan::Catalog> prepare_job_options(JobOptions& o) {
  if (o.exclusive_given) o.req.exclusive = o.exclusive;
  o.req.site_prelude = !o.no_site_prelude;
  if (o.req.aiscale.empty() && !o.req.container.empty()) {
    // Inside the image the binary is the image's own (on its PATH): this host's path to
    // aiscale means nothing there.
    o.req.aiscale = "aiscale";
  } else if (o.req.aiscale.empty()) {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    o.req.aiscale = ec ? "aiscale" : self.string();
  }
  if (o.req.system.empty() || o.req.system == "none") return nullptr;
  return std::make_unique<plan::Catalog>(plan::load_catalog(
      o.catalog_dir.empty() ? plan::default_catalog_dir() : o.catalog_dir, o.system_files));
}

}  // namespace aiscale::cli
