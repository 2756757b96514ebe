// aiscale train: train a GPT model from a TOML config (the work is in train/session.cpp).
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/run_options.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/train/config.h"
#include "aiscale/train/session.h"
#include "aiscale/train/vision_config.h"

namespace aiscale::cli {

void add_train_command(CLI::App& app) {
  const HelpSection help("train", "train");
  auto req = std::make_shared<train::TrainRequest>();
  auto run = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("train", help.about());
  help.option(cmd, "--config,-c", req->config_path)->check(CLI::ExistingFile);
  help.option(cmd, "--resume", req->resume_dir);
  help.option(cmd, "--checkpoint", req->checkpoint_step)->check(integer_in(0, int64_t{1} << 40));
  help.flag(cmd, "--resume-fallback", req->resume_fallback);
  help.option(cmd, "--set,-s", req->overrides)->take_all();
  help.flag(cmd, "--quiet,-q", req->quiet);
  auto reference = std::make_shared<bool>(false);
  help.flag(cmd, "--config-reference", *reference);
  cmd->add_option_function<int64_t>(
         "--profile", [req](int64_t n) { req->profile_steps = n; }, help.of("--profile"))
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
