// Every integer option of every command, given a value beyond 64 bits, is refused as out of
// range with its range, before anything runs (CLI11 alone would keep the largest 64-bit
// value without a word, or say only "Could not convert").
#include <gtest/gtest.h>

#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/command_check.h"
#include "aiscale/cli/commands.h"

namespace aiscale::cli {
namespace {

struct IntegerOption {
  std::vector<std::string> path;  // subcommands, e.g. {"bench", "language"}
  std::string name;               // "--steps"
};

std::vector<IntegerOption> integer_options() {
  CLI::App app("aiscale");
  for (auto add : {add_train_command, add_bench_command, add_sample_command, add_launch_command,
                   add_data_command, add_plan_command, add_scale_command, add_report_command,
                   add_slurm_command, add_tune_command})
    add(app);
  std::vector<IntegerOption> out;
  std::function<void(CLI::App*, std::vector<std::string>)> walk = [&](CLI::App* a, std::vector<std::string> path) {
    for (CLI::Option* o : a->get_options()) {
      const std::string type = o->get_type_name();
      if (o->get_lnames().empty() || (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0)) continue;
      out.push_back({path, "--" + o->get_lnames().front()});
    }
    for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) {
      auto p = path;
      if (!sub->get_name().empty()) p.push_back(sub->get_name());
      walk(sub, p);
    }
  };
  walk(&app, {});
  return out;
}

TEST(IntegerOptions, ValuesBeyondSixtyFourBitsAreOutOfRangeWithTheRange) {
  const auto options = integer_options();
  ASSERT_GT(options.size(), 40u);
  for (const auto& o : options) {
    for (const char* value : {"99999999999999999999", "-99999999999999999999"}) {
      auto argv = o.path;
      argv.insert(argv.end(), {o.name, value});
      const std::string why = aiscale_command_error(argv);
      SCOPED_TRACE(fmt::format("{} {} {}", fmt::join(o.path, " "), o.name, value));
      EXPECT_NE(why.find(o.name), std::string::npos) << why;
      EXPECT_NE(why.find("is out of range: give a whole number"), std::string::npos) << why;
    }
  }
}

}  // namespace
}  // namespace aiscale::cli
