// aiscale scale: run a scaling study (the work is in sweep/) and analyse it.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/command_check.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/slurm_options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/exception_text.h"
#include "aiscale/core/fs.h"
#include "aiscale/orchestrate/study_submit.h"
#include "aiscale/sweep/analysis.h"
#include "aiscale/sweep/reference_check.h"
#include "aiscale/sweep/study.h"
#include "aiscale/sweep/stop_signals.h"
#include "aiscale/sweep/study_dir.h"

namespace aiscale::cli {
namespace {

struct ScaleArgs {
  std::string study;
  std::string output;
  std::string analyze;
  std::string reference;  // --reference FILE
  std::string mpirun = "mpirun";
  std::string scheduler = "local";
  JobOptions slurm;
  orchestrate::SubmitOptions submit;
  bool dry_run = false;
  bool oversubscribe = false;
  double stop_timeout_s = 60;
};

std::string fmt_opt(const nlohmann::json& v, const char* f) {
  return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-");
}

void print_summary(const nlohmann::json& a) {
  const bool weak = a["study"].value("kind", "") == "weak";
  for (const auto& s : a["series"]) {
    std::printf("%s (%s scaling, %s per device):\n", s.value("label", "").c_str(),
                a["study"].value("kind", "").c_str(), a["study"].value("unit", "").c_str());
    std::printf("  %5s %7s %14s %12s %9s %10s%s\n", "n", "repeats", "per device", "step (s)",
                "speedup", "efficiency", weak ? "  epoch  train" : "");
    for (const auto& p : s["points"]) {
      std::string extra;
      if (weak && p["weak_efficiency"].is_object())
        extra = fmt::format("  {:>5} {:>6}", fmt_opt(p["weak_efficiency"]["epoch"], "{:.3f}"),
                            fmt_opt(p["weak_efficiency"]["train"], "{:.3f}"));
      std::printf("  %5d %7d %14.1f %12.4f %9.3f %10.3f%s\n", p.value("n", 0), p.value("repeats", 0),
                  p["throughput_per_device"].value("median", 0.0), p.value("step_time_median_s", 0.0),
                  p.value("speedup", 0.0), p.value("efficiency", 0.0), extra.c_str());
      for (const auto& st : p["stragglers"])
        std::printf("        straggler: rank %d (repeat %d) %.1f%% slower than the median rank\n",
                    st.value("rank", 0), st.value("repeat", 0), 100 * st.value("slower_by", 0.0));
    }
    if (s["amdahl"].is_object() && s["amdahl"]["residual_rms"].is_number())
      std::printf("  Amdahl fit: serial fraction %.4f, residual %.2g s (%.1f%% of the mean time)\n",
                  s["amdahl"].value("serial_fraction", 0.0), s["amdahl"].value("residual_rms", 0.0),
                  100 * s["amdahl"].value("residual_rms_relative", 0.0));
    else if (s["amdahl"].is_object())
      std::printf("  Amdahl: serial fraction %.4f from 2 rank counts (determined, not fitted: "
                  "measure a third to judge the fit)\n",
                  s["amdahl"].value("serial_fraction", 0.0));
  }
  for (const auto& f : a["failed_points"]) {
    const std::string reason = f.value("reason", "");
    std::printf("failed: %s: %s\n", f.value("id", "").c_str(), reason.substr(0, reason.find('\n')).c_str());
  }
}

// "n1-fp32-r1, n2-fp32-r1" (at most 6, then "and N more").
std::string id_list(const std::vector<std::string>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 6; ++i) out += (i ? ", " : "") + ids[i];
  if (ids.size() > 6) out += fmt::format(" and {} more", ids.size() - 6);
  return out;
}

// Every point's command as this aiscale parses it (a bench workload's options are the
// user's), once per count and precision: a point that could never run is refused before
// any other runs.
void check_point_commands(const sweep::Study& study, const std::string& dir) {
  std::set<std::pair<int, std::string>> seen;
  for (const auto& p : sweep::study_points(study)) {
    if (!seen.insert({p.ranks, p.precision}).second) continue;
    const auto argv = sweep::point_argv(
        study, p, (std::filesystem::absolute(dir) / "points" / p.id).lexically_normal().string());
    const std::string why = aiscale_command_error(argv);
    if (!why.empty())
      fail("{}: point {} could never run: aiscale refuses its command ({}): {}; fix {}",
           study.source_path, p.id, fmt::join(argv, " "), why,
           study.workload.type == "bench" ? "workload.options" : "workload.set");
  }
}

// With --scheduler slurm: every point's job as the options and the site preset make it,
// resolved before the study directory is written or anything submitted.
void check_point_jobs(const sweep::Study& study, const orchestrate::ScriptRequest& job,
                      const plan::Catalog* catalog) {
  for (const auto& p : sweep::study_points(study)) {
    if (p.repeat > 1) continue;
    orchestrate::ScriptRequest r = job;
    r.argv = {"scale"};
    r.ranks = p.ranks;
    r.nodes = 0;
    try {
      orchestrate::resolve_job(r, catalog);
    } catch (const Error& e) {
      fail("{}: point {} ({} rank(s)) cannot be submitted: {}", study.source_path, p.id, p.ranks, e.what());
    }
  }
}

// The reference checks of an analysis (reference_check.h): a line each; true when all pass.
bool print_references(const nlohmann::json& a) {
  if (!a.contains("references")) return true;
  bool all = true;
  for (const auto& r : a["references"]) {
    const bool pass = r.value("pass", false);
    all = all && pass;
    std::printf("  reference %s n=%d %s %.4g: %s%s%s\n", r.value("series", "").c_str(), r.value("n", 0),
                r.value("metric", "").c_str(), r.value("value", 0.0), pass ? "pass" : "FAIL",
                pass ? "" : ": ", r.value("why", "").c_str());
  }
  std::fflush(stdout);
  return all;
}

// Keeps the reference file with the study (checked first), so every later analysis and
// report of the study checks it.
void keep_references(const std::string& file, const std::string& dir) {
  if (file.empty()) return;
  sweep::load_references(file);
  atomic_write_file((std::filesystem::path(dir) / "reference.toml").string(), read_file(file));
}

[[noreturn]] void references_failed(const std::string& dir) {
  fail("the study misses its reference values (the FAIL lines above; {}/reference.toml): the "
       "measurements stay in {}", dir, dir);
}

// The exit status says whether every point was measured: one line naming the failed
// points and where their logs are, and status 1.
[[noreturn]] void points_failed(const std::string& dir, const std::vector<std::string>& ids, size_t total) {
  fail("{} of {} point(s) failed ({}): their logs are {}/points/<id>/log.txt; fix the cause and run "
       "the same command again (finished points are skipped)", ids.size(), total, id_list(ids), dir);
}

}  // namespace

void add_scale_command(CLI::App& app) {
  const HelpSection help("scale", "scale");
  auto args = std::make_shared<ScaleArgs>();
  auto* cmd = app.add_subcommand("scale", help.about());
  help.option(cmd, "study", args->study)->check(CLI::ExistingFile);
  help.option(cmd, "--output,-o", args->output);
  help.option(cmd, "--analyze", args->analyze);
  help.option(cmd, "--reference", args->reference);
  help.option(cmd, "--mpirun", args->mpirun)->capture_default_str();
  help.flag(cmd, "--dry-run", args->dry_run);
  cmd->add_flag("--oversubscribe", args->oversubscribe,
                fmt::format("run points of more than {} ranks per core of this machine (refused "
                            "by default: such a point measures the operating system's scheduler)",
                            sweep::kMaxRanksPerCore));
  help.option(cmd, "--stop-timeout", args->stop_timeout_s)
      ->capture_default_str()->check(number_in(0, 86400));
  help.option(cmd, "--scheduler", args->scheduler)
      ->capture_default_str()->check(CLI::IsMember({"local", "slurm"}));
  auto* slurm = cmd->add_option_group("Slurm", "with --scheduler slurm: the jobs' resources and site preset");
  args->slurm.req.aiscale.clear();  // default: this binary's absolute path
  add_job_options(slurm, args->slurm, true);
  help.option(slurm, "--mode", args->submit.mode)
      ->capture_default_str()->check(CLI::IsMember({"chain", "array"}));
  help.option(slurm, "--array-parallel", args->submit.array_parallel)
      ->capture_default_str()->check(integer_in(1, 1000000));
  cmd->footer(help.footer());
  cmd->callback([args] {
    if (!args->analyze.empty()) {
      if (std::filesystem::is_directory(args->analyze)) {
        auto index = sweep::refresh_point_states(args->analyze);
        keep_references(args->reference, args->analyze);
        auto a = sweep::analyze_study(args->analyze);
        print_summary(a);
        const bool references_pass = print_references(a);
        std::printf("analysis: %s/analysis.json\n", args->analyze.c_str());
        std::fflush(stdout);
        std::vector<std::string> failed;
        for (const auto& f : a["failed_points"]) failed.push_back(f.value("id", ""));
        if (!failed.empty()) points_failed(args->analyze, failed, index["points"].size());
        if (!references_pass) references_failed(args->analyze);
      } else {
        std::printf("%s\n", sweep::analyze_jsonl(args->analyze).dump(2).c_str());
      }
      return;
    }
    if (args->study.empty()) throw CLI::RequiredError("STUDY.toml (or --analyze DIR)");
    if (args->output.empty()) throw CLI::RequiredError("--output STUDY_DIR");
    const sweep::Study study = sweep::load_study(args->study);
    // Every point is checked before the study directory is written and before any runs.
    sweep::check_study_points(study);
    check_point_commands(study, args->output);
    std::unique_ptr<plan::Catalog> catalog;
    if (args->scheduler == "slurm") {
      catalog = prepare_job_options(args->slurm);
      check_point_jobs(study, args->slurm.req, catalog.get());
    } else if (!args->dry_run) {
      sweep::LocalCapacity machine = sweep::this_machine();
      machine.oversubscribe = args->oversubscribe;
      sweep::check_local_capacity(study, machine);
      if (std::filesystem::exists(std::filesystem::path(args->output) / "study.json"))
        sweep::check_no_point_processes(args->output);
    }
    if (!args->reference.empty()) sweep::load_references(args->reference);  // before anything runs
    const std::string command = fmt::format("aiscale scale {} -o {}", args->study, args->output);
    auto index = sweep::open_study_dir(study, args->output, command);
    keep_references(args->reference, args->output);
    std::printf("study '%s' (%s scaling, %zu points) in %s\n", study.name.c_str(), study.kind.c_str(),
                index["points"].size(), args->output.c_str());
    std::fflush(stdout);
    if (args->scheduler == "slurm") {
      // The points' commands are in place; Slurm runs them (study_submit.h). A refused
      // sbatch leaves the study as it was.
      args->submit.job = args->slurm.req;
      args->submit.dry_run = args->dry_run;
      const auto r = orchestrate::submit_study(args->output, args->submit, catalog.get());
      for (const auto& [id, why] : r.skipped) std::printf("  %s: not submitted: %s\n", id.c_str(), why.c_str());
      for (const auto& [id, job] : r.submitted)
        std::printf("  %s: %s\n", id.c_str(), args->dry_run ? "script written (dry run)" : ("job " + job).c_str());
      if (args->dry_run)
        for (const auto& script : r.scripts) std::printf("wrote %s\n", script.c_str());
      std::printf("%zu point(s) submitted; follow them with: aiscale slurm status %s --wait; then "
                  "aiscale slurm collect %s and aiscale report %s -o report.html\n",
                  r.submitted.size(), args->output.c_str(), args->output.c_str(), args->output.c_str());
      return;
    }
    if (args->dry_run) {
      for (const auto& p : index["points"]) std::printf("  %s: %s\n", p.value("id", "").c_str(), p.value("state", "").c_str());
      return;
    }
    sweep::RunStudyOptions o;
    o.executor.mpirun = args->mpirun;
    o.executor.stop_timeout_s = args->stop_timeout_s;
    o.progress = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    const auto result = sweep::run_study_locally(args->output, o);
    if (result.stop_signal) {
      std::printf("stopped by %s%s; %d point(s) finished before it, %d failed; run the same command "
                  "again to resume (finished points are skipped)\n",
                  sweep::stop_signal_name(result.stop_signal),
                  result.interrupted_point.empty()
                      ? " between two points"
                      : (": point " + result.interrupted_point + " was ended and is recorded as "
                         "interrupted").c_str(),
                  result.finished, result.failed);
      std::fflush(stdout);
      throw ReportedFailure(128 + result.stop_signal);
    }
    auto a = sweep::analyze_study(args->output);
    print_summary(a);
    const bool references_pass = print_references(a);
    std::printf("%d point(s) finished, %d failed, %d skipped (finished before); analysis: %s/analysis.json\n",
                result.finished, result.failed, result.skipped, args->output.c_str());
    std::fflush(stdout);
    if (result.failed > 0) points_failed(args->output, result.failed_points, index["points"].size());
    if (!references_pass) references_failed(args->output);
  });
}

}  // namespace aiscale::cli
