// aiscale train: train a GPT model from a TOML config (the work is in train/session.cpp).
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/run_options.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/train/config.h"
#include "aiscale/train/session.h"
#include "aiscale/train/vision_config.h"

namespace aiscale::cli {

void add_train_command(CLI::App& app) {
  auto req = std::make_shared<train::TrainRequest>();
  auto run = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand(
      "train",
      "Train a GPT model (or, with [model] kind = \"resnet\", an image classifier: "
      "docs/guide/vision.md) from a TOML config. Writes a run directory (config.toml, metrics.jsonl, "
      "checkpoints/, summary.json). Runs on N ranks when started by mpirun, srun or "
      "`aiscale launch -n N -- train ...`. SIGTERM/SIGINT finish the step, write a checkpoint "
      "and exit cleanly; SIGUSR1 finishes the step and exits without one (summary status stopped). Exit status: 0 finished or stopped by a signal, 1 an error (the message "
      "names the input), 3 the run diverged (see train.divergence_factor).");
  cmd->add_option("--config,-c", req->config_path, "TOML run configuration (see configs/)")
                     ->check(CLI::ExistingFile);
  cmd->add_option("--resume", req->resume_dir,
                  "continue RUN_DIR from its newest complete checkpoint (its config.toml is "
                  "used unless --config is given), also in another layout, rank count or batch "
                  "(--set parallel.*, train.batch_size; docs/guide/checkpoints.md)");
  cmd->add_option("--checkpoint", req->checkpoint_step,
                  "with --resume: continue from this step's checkpoint instead of the newest "
                  "(newer ones are set aside as step_N.superseded)")
      ->check(integer_in(0, int64_t{1} << 40));
  cmd->add_flag("--resume-fallback", req->resume_fallback,
                "with --resume: if the newest checkpoint is corrupt, set it aside "
                "(step_N.corrupt) and continue from the newest good one");
  cmd->add_option("--set,-s", req->overrides,
                  "override a config key: --set train.steps=50 (repeatable)")
      ->take_all();
  cmd->add_flag("--quiet,-q", req->quiet, "no progress line");
  auto reference = std::make_shared<bool>(false);
  cmd->add_flag("--config-reference", *reference,
                "print the reference of every config key (type, default, allowed values, "
                "meaning) as Markdown and exit: docs/reference/config.md is its output");
  cmd->add_option_function<int64_t>(
         "--profile", [req](int64_t n) { req->profile_steps = n; },
         "profile STEPS steps after the first (warm-up) step: an op table (printed, and "
         "RUN_DIR/profile/op_table.{json,md}) and a Chrome trace-event file for Perfetto "
         "(RUN_DIR/profile/trace.json); see docs/guide/observability.md")
      ->type_name("STEPS");
  // The options shared with `bench language` and `plan`, each setting its config key (as a
  // --set before the --set options would).
  add_run_options(cmd, *run, run_option_keys(), "Run settings (each sets its config key)");
  cmd->footer("Config keys (section.key, type, meaning):\n" + train::config_reference() +
              "\nVision config keys ([model] kind = \"resnet\"):\n" +
              train::vision_config_reference());
  cmd->callback([req, run, reference] {
    if (*reference) {
      fmt::print("{}", train::config_reference_markdown());
      return;
    }
    if (req->config_path.empty() && req->resume_dir.empty())
      throw CLI::RequiredError("--config (or --resume RUN_DIR)");
    const std::vector<std::string> from_options = run->overrides();
    req->overrides.insert(req->overrides.begin(), from_options.begin(), from_options.end());
    // The communicator is held here, so that a failure is printed (and the peers ended)
    // before it goes: parallel/rank_failure.h.
    parallel::RankContext context;
    req->rank_context = &context;
    int code = 0;
    try {
      code = train::run_training(*req);
    } catch (...) {
      parallel::report_rank_failure(context);
    }
    if (code != 0) std::exit(code);
  });
}

}  // namespace aiscale::cli
