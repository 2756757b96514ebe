#include "aiscale/cli/command_check.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/commands.h"

namespace aiscale::cli {
namespace {

// An App that parses without running anything: CLI11's parse() is _validate, _configure,
// _parse, then run_callback, which runs the chosen subcommand's callback; this stops before
// it. (The callbacks stay: they own, through their captures, the variables the options
// write into.)
class ParseOnlyApp : public CLI::App {
 public:
  using CLI::App::App;
  void parse_only(std::vector<std::string> reversed_args) {
    parsed_ = 1;
    _validate();
    _configure();
    parent_ = nullptr;
    parsed_ = 0;
    _parse(reversed_args);
  }
};

// The commands as main() adds them (main.cpp lists the same functions).
std::unique_ptr<ParseOnlyApp> command_definitions() {
  auto app = std::make_unique<ParseOnlyApp>("aiscale");
  app->require_subcommand(1);
  app->fallthrough(false);
  add_train_command(*app);
  add_bench_command(*app);
  add_sample_command(*app);
  add_launch_command(*app);
  add_data_command(*app);
  add_plan_command(*app);
  add_scale_command(*app);
  add_report_command(*app);
  add_slurm_command(*app);
  add_tune_command(*app);
  return app;
}

// Paths are left to the machine (and working directory) the command runs in.
void skip_path_checks(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    for (int i = 0;; ++i) {
      CLI::Validator* v = nullptr;
      try {
        v = opt->get_validator(i);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
      // CLI11's path checks are told by their description (they have no name).
      const std::string desc = v->get_description();
      if (desc == "FILE" || desc == "DIR" || desc == "PATH(existing)" || desc == "PATH(non-existing)")
        v->active(false);
    }
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) skip_path_checks(sub);
}

}  // namespace

std::vector<std::string> aiscale_subcommands() {
  auto app = command_definitions();
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; }))
    if (!sub->get_name().empty()) names.push_back(sub->get_name());
  return names;
}

std::string aiscale_command_error(const std::vector<std::string>& argv) {
  if (argv.empty()) return "the command is empty: give an aiscale subcommand, e.g. train --config my.toml";
  const auto names = aiscale_subcommands();
  if (std::find(names.begin(), names.end(), argv.front()) == names.end())
    return fmt::format("'{}' is not an aiscale command (the commands are {})", argv.front(),
                       fmt::join(names, ", "));
  auto app = command_definitions();
  skip_path_checks(app.get());
  try {
    app->parse_only(std::vector<std::string>(argv.rbegin(), argv.rend()));  // last first
  } catch (const CLI::CallForHelp&) {
  } catch (const CLI::CallForAllHelp&) {
  } catch (const CLI::CallForVersion&) {
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

}  // namespace aiscale::cli
