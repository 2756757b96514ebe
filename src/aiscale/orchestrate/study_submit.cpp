#include "aiscale/orchestrate/study_submit.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/orchestrate/process.h"
#include "aiscale/orchestrate/slurm_jobs.h"
#include "aiscale/orchestrate/study_files.h"

namespace aiscale::orchestrate {
namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// A script to submit: its text, the points it runs and the array task of each.
struct PlannedJob {
  std::string name;                 // file name under slurm/
  std::string text;
  std::vector<std::string> points;  // one, or the array's points in task order
  bool array = false;
};

// Why a point is not submitted again, or "" to submit it.
std::string skip_reason(const StudyPoint& p, const SlurmRecord& rec,
                        const std::map<std::string, JobState>& live) {
  if (p.study_state == "finished") return "finished (study.json)";
  const PointJob* job = rec.current(p.id);
  if (!job) return "";
  auto it = live.find(job->job_id);
  if (it != live.end() && !is_terminal_state(it->second.state))
    return fmt::format("job {} is {}", job->job_id, it->second.state);
  // Without a state from the scale side, a job that completed with exit status 0 is done.
  const std::string state = it != live.end() ? it->second.state : job->state;
  const std::string code = it != live.end() ? it->second.exit_code : job->exit_code;
  if (p.study_state.empty() && state == "COMPLETED" && (code.empty() || code == "0:0"))
    return fmt::format("job {} completed", job->job_id);
  return "";
}

ScriptRequest point_request(const SubmitOptions& o, const StudyPoint& p, const fs::path& root) {
  ScriptRequest r = o.job;
  r.argv = p.argv;
  r.ranks = p.ranks;
  r.nodes = 0;
  r.chdir = root.string();
  r.pass_script_args = false;
  if (r.job_name.empty()) {
    // The point's id as a job name (an #SBATCH value): letters, digits, '.', '_', '-'.
    r.job_name = "aiscale-" + p.id;
    for (char& c : r.job_name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return r;
}

// sbatch --parsable prints "jobid" or "jobid;cluster".
std::string sbatch(const std::string& script, const std::string& dependency, const std::string& what) {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  if (!dependency.empty()) argv.push_back("--dependency=afterany:" + dependency);
  argv.push_back(script);
  ProcessResult r = run_process(argv);
  if (r.exit_code == 127)
    fail("sbatch is not installed or not on PATH: submit from a login node of the cluster "
         "(or install Debian's slurm-client)");
  std::string id = trim(r.out.substr(0, r.out.find(';')));
  if (!r.ok() || id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    fail("sbatch refused the job of {} ({}): {}: fix the option it names (--partition, --account, "
         "--qos, --time, --gpus-per-node, ...) and submit again", what, script,
         trim(r.err + r.out).empty() ? fmt::format("exit status {}", r.exit_code) : trim(r.err + r.out));
  return id;
}

}  // namespace

SubmitResult submit_study(const std::string& study_dir, const SubmitOptions& o,
                          const plan::Catalog* catalog) {
  if (o.mode != "chain" && o.mode != "array")
    fail("--mode '{}' is unknown: use chain (one job per point, each after the previous) or array",
         o.mode);
  if (o.array_parallel < 1) fail("--array-parallel {} must be at least 1", o.array_parallel);
  const fs::path root = fs::absolute(study_dir);
  const auto points = read_study_points(root.string());
  SlurmRecord rec = load_slurm_record(root.string());

  // Current states of the jobs already recorded (no Slurm needed when there are none).
  std::vector<std::string> known;
  for (const auto& [id, jobs] : rec.points)
    if (!jobs.empty()) known.push_back(jobs.back().job_id);
  std::map<std::string, JobState> live;
  if (!known.empty() && !o.dry_run) live = query_jobs(known);

  SubmitResult result;
  std::vector<const StudyPoint*> todo;
  for (const auto& p : points) {
    std::string why = skip_reason(p, rec, live);
    if (why.empty()) todo.push_back(&p);
    else result.skipped.emplace_back(p.id, why);
  }
  if (todo.empty()) return result;

  // The scripts: one per point, or one array per rank count (tasks of an array share
  // their resources).
  std::vector<PlannedJob> planned;
  for (const StudyPoint* p : todo) {
    ScriptRequest req = point_request(o, *p, root);
    JobScript job = resolve_job(req, catalog);
    job.point_id = p->id;
    const std::string log = (fs::path(p->dir) / "log.txt").string();
    if (o.mode == "chain") {
      job.log = log;
      planned.push_back({p->id + ".sbatch", render_sbatch(job), {p->id}, false});
      continue;
    }
    const std::string name = fmt::format("array-ranks{}.sbatch", p->ranks);
    auto it = std::find_if(planned.begin(), planned.end(), [&](const PlannedJob& j) { return j.name == name; });
    if (it == planned.end()) {
      planned.push_back({name, "", {}, true});
      it = planned.end() - 1;
    }
    it->points.push_back(p->id);
  }
  if (o.mode == "array")
    for (auto& pj : planned) {
      JobScript job;
      for (size_t i = 0; i < pj.points.size(); ++i) {
        const StudyPoint* p = *std::find_if(todo.begin(), todo.end(),
                                            [&](const StudyPoint* q) { return q->id == pj.points[i]; });
        JobScript one = resolve_job(point_request(o, *p, root), catalog);
        if (i == 0) {
          job = one;
          job.job_name = fmt::format("aiscale-ranks{}", p->ranks);
          job.output = (root / "slurm" / "%A_%a.out").string();
        }
        job.array_tasks.push_back({p->id, p->argv, (fs::path(p->dir) / "log.txt").string()});
      }
      job.array_parallel = o.array_parallel;
      pj.text = render_sbatch(job);
    }

  // Write the scripts aside; submit; only then move them into slurm/ and record the jobs.
  const fs::path slurm_dir = root / "slurm";
  const fs::path staging = o.dry_run ? slurm_dir / "dry-run"
                                     : slurm_dir / fmt::format(".staging-{}", ::getpid());
  fs::create_directories(staging);
  for (const auto& pj : planned) {
    atomic_write_file((staging / pj.name).string(), pj.text);
    fs::permissions(staging / pj.name, fs::perms::owner_exec | fs::perms::group_exec,
                    fs::perm_options::add);
  }
  if (o.dry_run) {
    for (const auto& pj : planned) result.scripts.push_back((staging / pj.name).string());
    for (const StudyPoint* p : todo) result.submitted.emplace_back(p->id, "");
    return result;
  }

  // A new chain continues after the study's last job still queued or running.
  std::string previous;
  for (const auto& p : points)
    if (const PointJob* j = rec.current(p.id)) {
      auto it = live.find(j->job_id);
      if (it != live.end() && !is_terminal_state(it->second.state)) previous = j->job_id;
    }
  std::vector<std::string> submitted_ids;
  std::vector<std::pair<const PlannedJob*, std::string>> ids;
  try {
    for (const auto& pj : planned) {
      const std::string what = pj.array ? fmt::format("points {}", fmt::join(pj.points, ", "))
                                        : "point " + pj.points.front();
      std::string id = sbatch((staging / pj.name).string(), previous, what);
      submitted_ids.push_back(id);
      ids.emplace_back(&pj, id);
      previous = id;
    }
  } catch (const Error& e) {
    for (const auto& id : submitted_ids) run_process({"scancel", id});
    std::error_code ec;
    fs::remove_all(staging, ec);
    fail("{}{}; the study is unchanged", e.what(),
         submitted_ids.empty() ? ""
                               : fmt::format(" (the {} job(s) submitted before it were cancelled: {})",
                                             submitted_ids.size(), fmt::join(submitted_ids, ", ")));
  }

  const std::string now = utc_iso8601();
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& [pj, id] : ids) {
    fs::rename(staging / pj->name, slurm_dir / pj->name);
    result.scripts.push_back((slurm_dir / pj->name).string());
    jobs.push_back(id);
    for (size_t i = 0; i < pj->points.size(); ++i) {
      PointJob job;
      job.job_id = pj->array ? fmt::format("{}_{}", id, i) : id;
      job.script = "slurm/" + pj->name;
      job.log = "points/" + pj->points[i] + "/log.txt";
      job.submitted = now;
      job.state = "PENDING";
      job.updated = now;
      rec.points[pj->points[i]].push_back(job);
      result.submitted.emplace_back(pj->points[i], job.job_id);
    }
  }
  std::error_code ec;
  fs::remove_all(staging, ec);
  rec.submissions.push_back({{"time", now}, {"mode", o.mode}, {"jobs", jobs}});
  save_slurm_record(root.string(), rec);
  return result;
}

}  // namespace aiscale::orchestrate
