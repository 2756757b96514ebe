// `aiscale slurm`: sbatch scripts for aiscale commands, with the site presets of the
// systems catalogue, and scaling studies run as Slurm jobs (submit, status, collect).
//   aiscale slurm script --system leonardo --nodes 4 -- train --config my.toml
//   aiscale slurm submit STUDY [--mode chain|array]
//   aiscale slurm status STUDY [--wait --timeout 3600]
//   aiscale slurm collect STUDY
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/command_check.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/slurm_options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/orchestrate/study_status.h"
#include "aiscale/orchestrate/study_files.h"
#include "aiscale/orchestrate/study_submit.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/sweep/study_dir.h"

namespace aiscale::cli {
namespace {

namespace orch = aiscale::orchestrate;

void add_script(CLI::App* slurm) {
  const HelpSection help("slurm", "script");
  auto o = std::make_shared<JobOptions>();
  o->req.aiscale.clear();
  auto out = std::make_shared<std::string>();
  auto* c = slurm->add_subcommand("script", help.about());
  add_job_options(c, *o, false);
  help.option(c, "-o,--out", *out);
  help.option(c, "command", o->req.argv)->required();
  c->callback([o, out] {
    // A command this aiscale does not run would fail only after the queue wait.
    if (const std::string why = aiscale_command_error(o->req.argv); !why.empty())
      fail("slurm script: the command after -- is not one aiscale runs ({}): {}; fix it before "
           "the job waits in the queue", fmt::join(o->req.argv, " "), why);
    auto cat = prepare_job_options(*o);
    orch::JobScript job = orch::resolve_job(o->req, cat.get());
    const std::string text = orch::render_sbatch(job);
    if (job.account_required && job.account.empty())
      fmt::print(stderr, "slurm script: {} charges every job to a project: give --account "
                 "(the script has a commented line for it)\n", job.label);
    if (out->empty()) {
      fmt::print("{}", text);
    } else {
      atomic_write_file(*out, text);
      std::filesystem::permissions(*out, std::filesystem::perms::owner_exec,
                                   std::filesystem::perm_options::add);
      fmt::print(stderr, "slurm script: wrote {} (submit: sbatch {})\n", *out, *out);
    }
  });
}

void add_submit(CLI::App* slurm) {
  const HelpSection help("slurm", "submit");
  auto o = std::make_shared<JobOptions>();
  o->req.aiscale.clear();
  auto so = std::make_shared<orch::SubmitOptions>();
  auto dir = std::make_shared<std::string>();
  auto* c = slurm->add_subcommand("submit", help.about());
  help.option(c, "study", *dir)->required();
  add_job_options(c, *o, true);
  help.option(c, "--mode", so->mode)->capture_default_str();
  help.option(c, "--array-parallel", so->array_parallel)
      ->capture_default_str()->check(integer_in(1, 1000000));
  help.flag(c, "--dry-run", so->dry_run);
  c->callback([o, so, dir] {
    // Every point's command, before any job is submitted.
    for (const auto& p : orch::read_study_points(*dir))
      if (const std::string why = aiscale_command_error(p.argv); !why.empty())
        fail("{}/command.json: point {}'s command is not one aiscale runs ({}): {}; write the "
             "study again with aiscale scale", p.dir, p.id, fmt::join(p.argv, " "), why);
    auto cat = prepare_job_options(*o);
    so->job = o->req;
    auto r = orch::submit_study(*dir, *so, cat.get());
    for (const auto& [id, why] : r.skipped) fmt::print("{}: not submitted: {}\n", id, why);
    for (const auto& [id, job] : r.submitted)
      fmt::print("{}: {}\n", id, so->dry_run ? "script written (dry run)" : "job " + job);
    if (so->dry_run)
      for (const auto& s : r.scripts) fmt::print("wrote {}\n", s);
    if (r.submitted.empty()) fmt::print("nothing to submit: every point is finished, queued or running\n");
  });
}

void add_status(CLI::App* slurm) {
  const HelpSection help("slurm", "status");
  auto dir = std::make_shared<std::string>();
  auto wait = std::make_shared<bool>(false);
  auto wo = std::make_shared<orch::WaitOptions>();
  auto* c = slurm->add_subcommand("status", help.about());
  help.option(c, "study", *dir)->required();
  help.flag(c, "--wait", *wait);
  help.option(c, "--timeout", wo->timeout_s)->capture_default_str()->check(positive_number());
  help.option(c, "--poll-max", wo->max_poll_s)->capture_default_str()->check(positive_number());
  c->callback([dir, wait, wo] {
    std::vector<orch::PointStatus> st;
    if (*wait) {
      st = orch::wait_for_study(*dir, *wo, [](const std::vector<orch::PointStatus>& s) {
        int active = 0;
        for (const auto& p : s) active += p.active;
        fmt::print(stderr, "slurm status: {} of {} point(s) queued or running\n", active, s.size());
      });
    } else {
      st = orch::poll_study(*dir);
    }
    fmt::print("{}", orch::format_status(st));
    int died = 0;
    for (const auto& p : st) died += p.died;
    if (*wait && died > 0) fail("{} point(s) of {} died (above): fix the cause and submit again "
                                "(aiscale slurm submit {} resubmits only those)", died, *dir, *dir);
  });
}

void add_collect(CLI::App* slurm) {
  const HelpSection help("slurm", "collect");
  auto dir = std::make_shared<std::string>();
  auto* c = slurm->add_subcommand("collect", help.about());
  help.option(c, "study", *dir)->required();
  c->callback([dir] {
    // study.json's point states from the point folders (exit_code, results), as the
    // local runner leaves them.
    auto st = orch::collect_study(*dir, [](const std::string& d) { sweep::refresh_point_states(d); });
    fmt::print("{}", orch::format_status(st));
    fmt::print("analyse and report: aiscale scale --analyze {} && aiscale report {} -o report.html\n",
               *dir, *dir);
  });
}

}  // namespace

void add_slurm_command(CLI::App& app) {
  const HelpSection help("slurm", "slurm");
  auto* slurm = app.add_subcommand("slurm", help.about());
  slurm->require_subcommand(1);
  add_script(slurm);
  add_submit(slurm);
  add_status(slurm);
  add_collect(slurm);
}

}  // namespace aiscale::cli
