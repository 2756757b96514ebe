// `aiscale slurm script`: the sbatch script of one aiscale command (a train run, a bench,
// a point of a scaling study), from the user's options and the site preset of the systems
// catalogue ([system.partition.slurm]). The script is meant to be read and edited: every
// choice is commented, and extra aiscale arguments given to sbatch after the script's
// name are passed on ("$@").
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "aiscale/plan/catalog.h"

namespace aiscale::orchestrate {

// What the user asked for; empty / 0 / -1 mean "the preset's, else the default".
struct ScriptRequest {
  std::string system;              // "leonardo" or "leonardo/booster"; "" or "none": no preset
  std::string partition;           // Slurm partition name (overrides the preset's)
  std::string account, qos;
  int nodes = 0;                   // 0: from ranks, else 1
  int ranks = 0;                   // total ranks; 0: nodes × tasks per node
  int tasks_per_node = 0;          // 0: one per GPU of the node (GPU presets), else 1
  int gpus_per_node = -1;          // -1: the preset's (0 without preset)
  int cpus_per_task = 0;           // 0: the preset's cores per GPU, else 1
  std::string gpu_request;         // "gpus-per-node" | "gres" | "none"; "": the preset's
  std::string cpu_bind;            // srun --cpu-bind; "": the preset's; "none": no binding
  std::optional<bool> exclusive;   // unset: the preset's (true without preset)
  std::string time = "01:00:00";   // Slurm time limit
  int signal_lead_s = 120;         // SIGTERM this many seconds before the limit; 0: none
  std::string job_name;            // "": aiscale-<command>
  std::string output;              // sbatch --output; "": %x-%j.out
  std::string chdir;               // sbatch --chdir; "": where sbatch is run
  std::vector<std::string> prelude;  // shell lines after the preset's
  std::vector<std::string> env;      // NAME=value after the preset's
  bool site_prelude = true;        // include the preset's prelude lines
  std::string container;           // image to run aiscale in (the preset's container_exec)
  std::string launcher;            // "srun" | "mpirun" | "none"; "": the preset's (srun)
  std::string srun_mpi;            // srun --mpi; "": the preset's (pmix)
  std::string aiscale = "aiscale"; // the aiscale binary as the job will find it
  std::vector<std::string> argv;   // aiscale arguments: {"train", "--config", "x.toml"}
  bool pass_script_args = true;    // append sbatch's extra arguments ("$@") to argv
};

// One task of a job array (study points submitted as an array).
struct ArrayTask {
  std::string point_id;
  std::vector<std::string> argv;
  std::string log;  // the point's log.txt
};

// Everything resolved: what the script will say.
struct JobScript {
  std::string label;               // "leonardo/booster" or "" (no preset)
  std::string source;              // where the site documents its conventions
  std::string job_name, partition, account, qos;
  bool account_required = false;
  int nodes = 1, tasks_per_node = 1, ntasks = 1, gpus_per_node = 0, cpus_per_task = 1;
  std::string gpu_request = "gpus-per-node", gres_name = "gpu";
  std::string cpu_bind, gpu_bind;
  bool exclusive = true;
  std::string time;
  long time_s = 0;
  int signal_lead_s = 120;
  std::string output, chdir;
  std::vector<std::string> prelude, env;
  std::string container, container_exec;
  std::string launcher = "srun", srun_mpi = "pmix";
  std::string aiscale = "aiscale";
  std::vector<std::string> argv;
  bool pass_script_args = true;
  // Study points: the log every line of the job goes to (instead of --output), or an array.
  std::string log;
  std::string point_id;
  std::vector<ArrayTask> array_tasks;
  int array_parallel = 1;          // tasks of the array that may run at once (%N)
};

// Resolves a request against the catalogue (nullptr: no catalogue, no --system).
// Throws Error for an unknown system or partition, a partition without a Slurm preset,
// more GPUs per node than the preset has, a malformed or too long time limit, a signal
// lead not shorter than the limit, or an empty command.
JobScript resolve_job(const ScriptRequest& request, const plan::Catalog* catalog);

// The sbatch script's text.
std::string render_sbatch(const JobScript& job);

// `value` quoted for bash where it needs quoting ('...' with ' escaped).
std::string shell_quote(const std::string& value);

}  // namespace aiscale::orchestrate
