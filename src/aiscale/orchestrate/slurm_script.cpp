#include "aiscale/orchestrate/slurm_script.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "aiscale/core/ascii.h"
#include "aiscale/core/error.h"
#include "aiscale/orchestrate/script_text.h"
#include "aiscale/plan/engine_support.h"
#include "aiscale/plan/time_limit.h"

namespace aiscale::orchestrate {
namespace {

std::string lower(const std::string& s) { return ascii_lower(s); }

// The partition of `name` that has a Slurm preset ("leonardo" picks the first such GPU
// partition, "leonardo/booster" that one).
plan::Target preset_target(const plan::Catalog& cat, const std::string& name) {
  std::string sys = name, part;
  if (auto slash = name.find('/'); slash != std::string::npos) {
    sys = name.substr(0, slash);
    part = name.substr(slash + 1);
  }
  const plan::System* s = cat.find_system(sys);
  if (!s) cat.resolve(name);  // throws: unknown system, listing the known ones
  std::string with_presets;
  for (const auto& p : s->partitions) {
    if (p.has_slurm) with_presets += (with_presets.empty() ? "" : ", ") + s->id + "/" + p.id;
    if (!part.empty() && lower(p.id) == lower(part)) {
      if (!p.has_slurm)
        fail("--system {}/{}: this partition has no Slurm preset in the catalogue ({}): add a "
             "[system.partition.slurm] table (docs/guide/slurm.md){}", s->id, p.id, fmt::join(s->files, ", "),
             with_presets.empty() ? "" : ", or use one of " + with_presets);
      return {s, &p};
    }
  }
  if (!part.empty()) cat.resolve(name);  // throws: no such partition, listing them
  for (const auto& p : s->partitions)
    if (p.has_slurm) return {s, &p};
  fail("--system {}: no partition of it has a Slurm preset in the catalogue: add a "
       "[system.partition.slurm] table (docs/guide/slurm.md) or leave --system out and give "
       "--partition, --gpus-per-node and --cpus-per-task yourself", s->id);
}

// "train", "bench-language": the command's leading words, as letters, digits, '.', '_' and
// '-' only (a job name is an #SBATCH value).
std::string command_name(const std::vector<std::string>& argv) {
  std::string name;
  for (const auto& a : argv) {
    if (a.empty() || a[0] == '-') break;
    name += (name.empty() ? "" : "-") + a;
    if (name.size() > 24) break;
  }
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return name.empty() ? "job" : name;
}

}  // namespace

std::string shell_quote(const std::string& v) {
  if (!v.empty() && std::all_of(v.begin(), v.end(), [](unsigned char c) {
        return std::isalnum(c) || std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
      }))
    return v;
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {

// Every text of the request and the preset that the script will hold, named by where it
// came from: the option, or the preset key (script_text.h).
void check_request_texts(const ScriptRequest& r, const JobScript& j) {
  const std::string site = j.label.empty() ? "" : fmt::format("{}'s Slurm preset (data/systems)", j.label);
  auto origin = [&](bool given, const std::string& option, const std::string& key) {
    return given || site.empty() ? option : fmt::format("{} {}", site, key);
  };
  check_script_text(j.label, "--system");
  check_script_text(j.source, site + " source");
  check_sbatch_value(j.job_name, r.job_name.empty() ? "the job name made from the command (--job-name)" : "--job-name");
  check_sbatch_value(j.partition, origin(!r.partition.empty(), "--partition", "partition"));
  check_sbatch_value(j.account, "--account");
  check_sbatch_value(j.qos, origin(!r.qos.empty(), "--qos", "qos"));
  check_sbatch_value(j.output, "--output");
  check_sbatch_value(j.chdir, "--chdir");
  check_word(j.gres_name, origin(false, "the GRES name", "gres_name"));
  check_word(j.srun_mpi, origin(!r.srun_mpi.empty(), "--srun-mpi", "srun_mpi"));
  check_script_text(j.cpu_bind, origin(!r.cpu_bind.empty(), "--cpu-bind", "cpu_bind"));
  check_script_text(j.gpu_bind, origin(false, "the GPU binding", "gpu_bind"));
  check_script_text(j.container, "--container");
  check_script_text(j.container_exec, origin(false, "the container command", "container_exec"));
  check_script_text(j.aiscale, "--aiscale");
  const size_t site_prelude = j.prelude.size() - r.prelude.size();
  for (size_t i = 0; i < j.prelude.size(); ++i)
    check_script_text(j.prelude[i], i < site_prelude ? site + " prelude" : "--prelude");
  const size_t site_env = j.env.size() - r.env.size();
  for (size_t i = 0; i < j.env.size(); ++i) {
    const std::string what = i < site_env ? site + " env" : "--env";
    const auto eq = j.env[i].find('=');
    check_env_name(j.env[i].substr(0, eq), fmt::format("{} '{}'", what, printable(j.env[i])));
    check_script_text(j.env[i].substr(eq + 1), fmt::format("{} {}", what, j.env[i].substr(0, eq)));
  }
  for (size_t i = 0; i < j.argv.size(); ++i)
    check_script_text(j.argv[i], fmt::format("argument {} of the aiscale command", i + 1));
}

}  // namespace

JobScript resolve_job(const ScriptRequest& r, const plan::Catalog* cat) {
  JobScript j;
  if (r.argv.empty())
    fail("slurm script: nothing to run: write the aiscale command after --, e.g. "
         "aiscale slurm script --nodes 2 -- train --config my.toml");
  const plan::Partition* part = nullptr;
  const plan::SlurmPreset defaults;
  const plan::SlurmPreset* preset = &defaults;
  if (!r.system.empty() && lower(r.system) != "none") {
    AISCALE_CHECK(cat != nullptr, "a --system needs the catalogue");
    plan::Target t = preset_target(*cat, r.system);
    part = t.partition;
    preset = &part->slurm;
    j.label = t.label();
    j.source = preset->source;
  }

  // Resources: one rank per GPU on GPU partitions.
  const int preset_gpus = part ? (part->is_gpu() ? part->gpus_per_node : 0) : 0;
  j.gpus_per_node = r.gpus_per_node >= 0 ? r.gpus_per_node : preset_gpus;
  if (j.gpus_per_node < 0) fail("--gpus-per-node {} is negative: give 0 or more", j.gpus_per_node);
  if (part && j.gpus_per_node > preset_gpus)
    fail("--gpus-per-node {}: {} has {} GPUs per node{}: ask for at most {} and spread the "
         "ranks over more nodes (--nodes)", j.gpus_per_node, j.label, preset_gpus,
         preset_gpus == 0 ? " (a CPU partition)" : "", preset_gpus);
  if (part && j.gpus_per_node > 0)
    if (std::string why = plan::device_gap(part->accelerator, part->is_cpu()); !why.empty())
      fail("slurm script: {}: {}. A GPU job there cannot run aiscale; choose a partition with "
           "NVIDIA GPUs (aiscale plan systems lists them), or --gpus-per-node 0 for CPU ranks",
           j.label, why);
  j.tasks_per_node = r.tasks_per_node > 0 ? r.tasks_per_node : std::max(1, j.gpus_per_node);
  if (r.tasks_per_node < 0) fail("--tasks-per-node {} must be positive", r.tasks_per_node);
  if (r.ranks < 0 || r.nodes < 0) fail("--ranks and --nodes must be positive");
  if (r.ranks > 0) {
    // A study point: as many nodes as its ranks need; a small point takes part of a node.
    if (r.ranks < j.tasks_per_node) j.tasks_per_node = r.ranks;
    j.nodes = (r.ranks + j.tasks_per_node - 1) / j.tasks_per_node;
    if (r.nodes > 0 && r.nodes != j.nodes)
      fail("--nodes {} does not fit {} ranks at {} per node ({} nodes): leave --nodes out or "
           "change --tasks-per-node", r.nodes, r.ranks, j.tasks_per_node, j.nodes);
    j.ntasks = r.ranks;
  } else {
    j.nodes = r.nodes > 0 ? r.nodes : 1;
    j.ntasks = j.nodes * j.tasks_per_node;
  }
  // More nodes than the partition has would wait in the queue for ever (or be refused after it).
  if (part && part->nodes > 0 && j.nodes > part->nodes)
    fail("{} node(s) asked for ({} rank(s) at {} per node), but {} has {} nodes: ask for fewer "
         "ranks or nodes{}", j.nodes, j.ntasks, j.tasks_per_node, j.label, part->nodes,
         r.ranks > 0 ? " (lower the study's counts)" : "");
  // GPUs follow the ranks of a node (a 2-rank point on a 4-GPU node asks for 2).
  if (j.gpus_per_node > 0 && r.gpus_per_node < 0) j.gpus_per_node = std::min(j.gpus_per_node, j.tasks_per_node);
  j.cpus_per_task = r.cpus_per_task > 0 ? r.cpus_per_task
                    : preset->cores_per_gpu > 0 && j.gpus_per_node > 0 ? preset->cores_per_gpu : 1;
  j.gpu_request = !r.gpu_request.empty() ? r.gpu_request : preset->gpu_request;
  if (j.gpu_request != "gpus-per-node" && j.gpu_request != "gres" && j.gpu_request != "none")
    fail("--gpu-request '{}' is unknown: use gpus-per-node, gres or none", j.gpu_request);
  j.gres_name = preset->gres_name;
  j.cpu_bind = !r.cpu_bind.empty() ? (r.cpu_bind == "none" ? "" : r.cpu_bind) : preset->cpu_bind;
  j.gpu_bind = preset->gpu_bind;
  j.exclusive = r.exclusive.value_or(preset->exclusive);

  // Scheduling.
  j.partition = !r.partition.empty() ? r.partition : preset->partition;
  j.account = r.account;
  j.account_required = preset->account_required;
  j.qos = !r.qos.empty() ? r.qos : preset->qos;
  j.time_s = plan::parse_slurm_time(r.time, "--time");
  j.time = r.time;
  if (!preset->max_time.empty()) {
    long max_s = plan::parse_slurm_time(preset->max_time, j.label + " max_time");
    if (j.time_s > max_s)
      fail("--time {} is longer than {}'s limit of {}: ask for at most {} (and resume from the "
           "checkpoint in a chained job: aiscale train --resume RUN_DIR)", r.time, j.label,
           preset->max_time, preset->max_time);
  }
  j.signal_lead_s = r.signal_lead_s;
  if (j.signal_lead_s < 0 || j.signal_lead_s > 65535)
    fail("--signal-lead {} must be between 0 and 65535 seconds", j.signal_lead_s);
  if (j.signal_lead_s >= j.time_s)
    fail("--signal-lead {} s is not shorter than the time limit {} ({} s): give a longer --time "
         "or a shorter --signal-lead", j.signal_lead_s, r.time, j.time_s);

  // Environment and launch.
  if (r.site_prelude) j.prelude = preset->prelude;
  j.prelude.insert(j.prelude.end(), r.prelude.begin(), r.prelude.end());
  j.env = preset->env;
  for (const auto& e : r.env) {
    if (e.find('=') == std::string::npos || e.front() == '=')
      fail("--env '{}' is not NAME=value", printable(e));
    j.env.push_back(e);
  }
  j.container = r.container;
  j.container_exec = preset->container_exec.empty() ? "apptainer exec" : preset->container_exec;
  j.launcher = !r.launcher.empty() ? r.launcher : preset->launcher;
  if (j.launcher != "srun" && j.launcher != "mpirun" && j.launcher != "none")
    fail("--launcher '{}' is unknown: use srun, mpirun or none", j.launcher);
  j.srun_mpi = !r.srun_mpi.empty() ? r.srun_mpi : preset->srun_mpi;
  j.aiscale = r.aiscale.empty() ? "aiscale" : r.aiscale;
  j.argv = r.argv;
  j.pass_script_args = r.pass_script_args;
  j.job_name = !r.job_name.empty() ? r.job_name : "aiscale-" + command_name(r.argv);
  j.output = !r.output.empty() ? r.output : "%x-%j.out";
  j.chdir = r.chdir;
  check_request_texts(r, j);
  return j;
}

// ---- rendering ------------------------------------------------------------------

namespace {

void sbatch_line(std::string& out, const std::string& option, const std::string& why = "") {
  if (!why.empty()) out += "# " + why + "\n";
  out += "#SBATCH " + option + "\n";
}

std::string joined_argv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    out += ' ';
    out += shell_quote(a);
  }
  return out;
}

}  // namespace

std::string render_sbatch(const JobScript& j) {
  // What a study adds after resolve_job (its points' ids, logs and commands), checked as the
  // options are (script_text.h).
  check_sbatch_value(j.output, "the job's --output");
  check_sbatch_value(j.log, fmt::format("the log of point {}", printable(j.point_id)));
  check_script_text(j.point_id, "the point id");
  for (const auto& t : j.array_tasks) {
    check_script_text(t.point_id, "the point id");
    check_script_text(t.log, fmt::format("the log of point {}", t.point_id));
    for (size_t i = 0; i < t.argv.size(); ++i)
      check_script_text(t.argv[i], fmt::format("argument {} of point {}'s command", i + 1, t.point_id));
  }
  std::string o = "#!/bin/bash\n";
  const bool array = !j.array_tasks.empty();
  const std::string what = array ? fmt::format("{} study points (job array)", j.array_tasks.size())
                           : !j.point_id.empty() ? "study point " + j.point_id
                                                 : "aiscale" + joined_argv(j.argv);
  o += fmt::format("# {}\n", what);
  o += fmt::format("# {} node(s) x {} rank(s) per node = {} rank(s){}{}\n", j.nodes, j.tasks_per_node,
                   j.ntasks, j.gpus_per_node > 0 ? fmt::format(", {} GPU(s) per node", j.gpus_per_node) : "",
                   j.label.empty() ? "" : ", on " + j.label);
  o += "# Written by `aiscale slurm script` (docs/guide/slurm.md). Edit it freely and submit with\n";
  o += "#   sbatch THIS_FILE";
  o += j.pass_script_args ? " [more aiscale arguments, e.g. --set train.steps=100]\n" : "\n";
  if (!j.source.empty()) o += "# Site conventions (data/systems): " + j.source + "\n";
  o += "\n";

  sbatch_line(o, "--job-name=" + j.job_name);
  if (!j.partition.empty()) sbatch_line(o, "--partition=" + j.partition);
  if (!j.account.empty()) sbatch_line(o, "--account=" + j.account);
  else if (j.account_required)
    o += "# This site charges every job to a project: put yours here and remove one '#'.\n"
         "##SBATCH --account=YOUR_PROJECT\n";
  if (!j.qos.empty()) sbatch_line(o, "--qos=" + j.qos);
  sbatch_line(o, fmt::format("--nodes={}", j.nodes));
  sbatch_line(o, fmt::format("--ntasks-per-node={}", j.tasks_per_node),
              j.gpus_per_node > 0 ? "One task (rank) per GPU." : "One task per rank.");
  if (j.ntasks != j.nodes * j.tasks_per_node)
    sbatch_line(o, fmt::format("--ntasks={}", j.ntasks), "The last node runs fewer ranks.");
  if (j.gpus_per_node > 0 && j.gpu_request == "gres")
    sbatch_line(o, fmt::format("--gres={}:{}", j.gres_name, j.gpus_per_node),
                "GPUs as a generic resource, the form this site documents; every rank sees the "
                "node's GPUs\n# and takes the one of its node-local rank (SLURM_LOCALID).");
  else if (j.gpus_per_node > 0 && j.gpu_request == "gpus-per-node")
    sbatch_line(o, fmt::format("--gpus-per-node={}", j.gpus_per_node),
                "GPUs per node; every rank sees the node's GPUs and takes the one of its "
                "node-local rank\n# (SLURM_LOCALID).");
  sbatch_line(o, fmt::format("--cpus-per-task={}", j.cpus_per_task),
              j.gpus_per_node > 0 ? "Cores per rank: the node's cores shared among its GPUs (the "
                                    "rank's OpenMP threads\n# and data loading)."
                                  : "Cores per rank: its OpenMP threads.");
  if (j.exclusive)
    sbatch_line(o, "--exclusive", "Whole nodes: no other job shares their memory bandwidth or "
                                  "network links, so\n# measurements stay comparable.");
  sbatch_line(o, "--time=" + j.time, fmt::format("Wall-time limit ({} s).", j.time_s));
  if (j.signal_lead_s > 0 && j.launcher == "none")
    sbatch_line(o, fmt::format("--signal=B:TERM@{}", j.signal_lead_s),
                fmt::format("SIGTERM to the batch script {} s before the limit, which passes it on to the "
                            "command:\n# aiscale tune stops its trials (each writes a checkpoint) and exits; "
                            "the same\n# command resumes.", j.signal_lead_s));
  else if (j.signal_lead_s > 0)
    sbatch_line(o, fmt::format("--signal=TERM@{}", j.signal_lead_s),
                fmt::format("SIGTERM to every rank {} s before the limit: aiscale train finishes "
                            "its step, writes a\n# checkpoint and exits (continue with aiscale "
                            "train --resume RUN_DIR).", j.signal_lead_s));
  if (array) {
    std::string spec = fmt::format("0-{}", j.array_tasks.size() - 1);
    if (j.array_parallel > 0) spec += fmt::format("%{}", j.array_parallel);
    sbatch_line(o, "--array=" + spec,
                fmt::format("One array task per point, at most {} at a time (%N).", j.array_parallel));
  }
  if (!j.log.empty())
    sbatch_line(o, "--output=" + j.log, "Everything the job prints goes to the point's log.");
  else
    sbatch_line(o, "--output=" + j.output);
  if (!j.chdir.empty()) sbatch_line(o, "--chdir=" + j.chdir);

  o += "\nset -uo pipefail\n";
  if (!j.log.empty() && !array) o += "log=" + shell_quote(j.log) + "\n";
  if (array) {
    o += "\n# --- the point of this array task -------------------------------------------\n";
    o += "case \"${SLURM_ARRAY_TASK_ID:?not an array job}\" in\n";
    for (size_t i = 0; i < j.array_tasks.size(); ++i) {
      const auto& t = j.array_tasks[i];
      o += fmt::format("  {}) point={} log={}\n     args=({}) ;;\n", i, shell_quote(t.point_id),
                       shell_quote(t.log), joined_argv(t.argv).substr(1));
    }
    o += "  *) echo \"no point for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\nesac\n";
    o += "exec >\"$log\" 2>&1\n";
  }

  o += "\n# --- environment ------------------------------------------------------------\n";
  for (const auto& line : j.prelude) o += line + "\n";
  for (const auto& e : j.env) {
    auto eq = e.find('=');
    o += "export " + e.substr(0, eq) + "=" + shell_quote(e.substr(eq + 1)) + "\n";
  }
  o += "# One OpenMP/BLAS thread per core of the rank.\n";
  o += "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1} OPENBLAS_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}\n";
  o += "# Since Slurm 22.05 srun does not take --cpus-per-task from sbatch; this passes it on.\n";
  o += "export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}\n";
  o += "AISCALE=${AISCALE:-" + shell_quote(j.aiscale) + "}\n";

  o += "\n# --- launch -----------------------------------------------------------------\n";
  std::string cmd;
  if (j.launcher == "srun") {
    o += "# srun starts the ranks; each reads its rank, the world size and its node-local rank from\n"
         "# SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (PMIX_RANK under PMIx) and meets the others\n"
         "# through MPI, bootstrapped by srun's --mpi plugin (AISCALE_SRUN_MPI overrides it).\n"
         "# --kill-on-bad-exit: one failing rank ends the step. --distribution=block: neighbouring\n"
         "# ranks share a node.";
    if (!j.cpu_bind.empty()) o += " --cpu-bind: each rank on cores of its own.";
    o += "\n";
    cmd = "srun --kill-on-bad-exit=1 --mpi=\"${AISCALE_SRUN_MPI:-" + j.srun_mpi +
          "}\" --distribution=block:block \\\n  --cpus-per-task=\"${SLURM_CPUS_PER_TASK:-1}\"";
    if (!j.cpu_bind.empty()) cmd += " --cpu-bind=" + shell_quote(j.cpu_bind);
    if (!j.gpu_bind.empty()) cmd += " --gpu-bind=" + shell_quote(j.gpu_bind);
    cmd += " \\\n  ";
  } else if (j.launcher == "none") {
    o += "# The command runs once, in the batch step: it starts its own job steps inside the\n"
         "# allocation (aiscale tune over training runs: each trial an srun of its ranks).\n";
  } else {
    o += "# mpirun inside the allocation starts the ranks (OpenMPI finds the nodes from Slurm);\n"
         "# each reads its rank from OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK. Neighbouring ranks share\n"
         "# a node (ppr: processes per node).\n";
    o += "if [ \"$(id -u)\" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi\n";
    cmd = fmt::format("mpirun -np \"${{SLURM_NTASKS:-{}}}\" --map-by ppr:{}:node --bind-to none \\\n"
                      "  -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x PATH -x LD_LIBRARY_PATH",
                      j.ntasks, j.tasks_per_node);
    for (const auto& e : j.env) cmd += " -x " + e.substr(0, e.find('='));
    cmd += " \\\n  ";
  }
  if (!j.container.empty()) cmd += j.container_exec + " " + shell_quote(j.container) + " ";
  cmd += "\"$AISCALE\"";
  cmd += array ? " \"${args[@]}\"" : joined_argv(j.argv);
  if (j.pass_script_args) cmd += " \"$@\"";
  if (!j.log.empty() || array) {
    o += "# A new attempt at this point: an earlier attempt's results and exit status go (its log\n"
         "# is this job's). Nothing of the point changes before the job starts.\n"
         "rm -rf \"$(dirname \"$log\")/run\" \"$(dirname \"$log\")/exit_code\"\n";
    o += "echo \"aiscale-slurm: job ${SLURM_JOB_ID:-?} on $(hostname) starts $(date -u +%FT%TZ)\"\n";
  }
  if (j.launcher == "none") {
    // In the background, so that the shell can pass SIGTERM on (a shell waiting for a
    // foreground command would end and leave the command running).
    o += "trap 'kill -TERM \"$child\" 2>/dev/null' TERM INT\n";
    o += cmd + " &\n";
    o += "child=$!\n";
    o += "wait \"$child\"\nstatus=$?\n";
    o += "while kill -0 \"$child\" 2>/dev/null; do wait \"$child\"; status=$?; done\n";
  } else {
    o += cmd + "\n";
    o += "status=$?\n";
  }
  if (!j.log.empty() || array)
    o += "# The point's exit status beside its log, written whole: the point's state is read from\n"
         "# its files alone (`aiscale slurm collect`, `aiscale scale --analyze`).\n"
         "printf '%s\\n' \"$status\" > \"$(dirname \"$log\")/exit_code.tmp\" &&\n"
         "  mv -f \"$(dirname \"$log\")/exit_code.tmp\" \"$(dirname \"$log\")/exit_code\"\n";
  o += "# The last line says how the ranks ended (read by `aiscale slurm status`).\n";
  o += "echo \"aiscale-slurm: exit status $status\"\n";
  o += "exit $status\n";
  return o;
}

}  // namespace aiscale::orchestrate
