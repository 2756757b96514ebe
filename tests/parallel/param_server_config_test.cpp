// The parameter-server keys of the train config (parallel.parameter_servers,
// max_staleness): defaults, the resolved TOML, and each combination that cannot run
// refused with the key and the fix named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/train/config.h"

using namespace aiscale;
using aiscale::train::parse_train_config;

namespace {

const char* kTiny = "[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\n";

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    parse_train_config(kTiny, "test.toml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ParamServerConfig, DefaultsAndResolvedToml) {
  auto c = parse_train_config(kTiny, "test.toml", {});
  EXPECT_EQ(c.parameter_servers, 0);
  EXPECT_EQ(c.max_staleness, 0);
  auto d = parse_train_config(kTiny, "test.toml", {"parallel.parameter_servers=2", "parallel.max_staleness=3"});
  const std::string toml = train::to_toml(d);
  EXPECT_NE(toml.find("parameter_servers = 2"), std::string::npos) << toml;
  EXPECT_NE(toml.find("max_staleness = 3"), std::string::npos) << toml;
  EXPECT_NE(train::config_reference().find("parallel.parameter_servers"), std::string::npos);
}

TEST(ParamServerConfig, CombinationsThatCannotRunAreRefused) {
  struct Case {
    std::vector<std::string> overrides;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"parallel.parameter_servers=1", "train.device=\"cuda\""}, "train.device = \"cpu\""},
      {{"parallel.parameter_servers=1", "parallel.zero_stage=2"}, "parallel.zero_stage = 0"},
      {{"parallel.parameter_servers=1", "parallel.compression=\"topk\""}, "parallel.compression = \"none\""},
      {{"parallel.parameter_servers=1", "parallel.grad_mixing=\"adasum\""}, "parallel.grad_mixing"},
      {{"parallel.parameter_servers=1", "parallel.allreduce=\"ring\""}, "parallel.allreduce"},
      {{"parallel.parameter_servers=1", "run.checkpoint_every=5"}, "run.checkpoint_every = 0"},
      {{"parallel.parameter_servers=1", "train.eval_every=10"}, "train.eval_every = 0"},
      {{"parallel.max_staleness=2"}, "set parallel.parameter_servers"},
  };
  for (const Case& k : cases) {
    const std::string e = error_of(k.overrides);
    EXPECT_NE(e.find(k.names), std::string::npos) << k.overrides.back() << ": " << e;
  }
  // Tensor or pipeline parallelism: refused by the layout check or the server check, with
  // a message naming the key either way.
  const std::string tp = error_of({"parallel.parameter_servers=1", "parallel.tensor_parallel=2"});
  EXPECT_NE(tp.find("parallel.tensor_parallel"), std::string::npos) << tp;
  EXPECT_EQ(error_of({"parallel.parameter_servers=1", "parallel.max_staleness=2"}), "");
}
