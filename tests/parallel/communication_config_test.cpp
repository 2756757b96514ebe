// The communication keys of the train config (parallel.allreduce, ranks_per_node,
// grad_mixing, compression, topk_ratio, parameter_servers, max_staleness): defaults, the resolved TOML, and each
// combination that cannot run refused with the key and the fix named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"
#include "aiscale/train/parallel_layout.h"

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

TEST(CommunicationConfig, DefaultsAndResolvedToml) {
  auto c = parse_train_config(kTiny, "test.toml", {});
  EXPECT_EQ(c.allreduce, "library");
  EXPECT_EQ(c.grad_mixing, "average");
  EXPECT_EQ(c.compression, "none");
  EXPECT_EQ(train::grad_mixing_of(c), "average");
  auto d = parse_train_config(kTiny, "test.toml",
                              {"parallel.allreduce=hierarchical", "parallel.ranks_per_node=2",
                               "parallel.compression=topk", "parallel.topk_ratio=0.05"});
  const std::string toml = train::to_toml(d);
  for (const char* line : {"allreduce = 'hierarchical'", "ranks_per_node = 2", "compression = 'topk'",
                           "topk_ratio = 0.05", "grad_mixing = 'average'"})
    EXPECT_NE(toml.find(line), std::string::npos) << line << "\n" << toml;
  // The older key still asks for the sum.
  EXPECT_EQ(train::grad_mixing_of(parse_train_config(kTiny, "test.toml", {"parallel.grad_reduce=sum"})), "sum");
}

TEST(CommunicationConfig, RefusesWhatCannotRunNamingTheFix) {
  struct Case {
    std::vector<std::string> overrides;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"parallel.allreduce=tree"}, "choose one of library, ring, hierarchical"},
      {{"train.device=cuda", "parallel.allreduce=ring", "parallel.grad_comm=bf16"}, "set parallel.grad_comm = \"fp32\""},
      {{"train.device=cuda", "parallel.allreduce=ring", "parallel.zero_stage=1"}, "set parallel.zero_stage = 0"},
      {{"train.device=cuda", "parallel.allreduce=hierarchical", "parallel.grad_transport=copy-engine"}, "set parallel.grad_transport = \"nccl\""},
      {{"train.device=cuda", "parallel.allreduce=ring", "parallel.tensor_parallel=2"}, "set parallel.tensor_parallel = 1"},
      {{"parallel.ranks_per_node=2"}, "set parallel.allreduce = \"hierarchical\""},
      {{"parallel.compression=topk", "parallel.zero_stage=2"}, "set parallel.zero_stage = 0"},
      {{"parallel.compression=int8", "parallel.zero_stage=3"}, "ZeRO-3"},
      {{"parallel.compression=int8", "parallel.tensor_parallel=2"}, "set parallel.tensor_parallel = 1"},
      {{"parallel.compression=int8", "parallel.pipeline_parallel=2", "parallel.microbatches=2"}, "parallel.pipeline_parallel = 1"},
      {{"parallel.compression=topk", "train.device=cuda"}, "parallel.grad_comm = \"bf16\""},
      {{"parallel.grad_mixing=adasum", "parallel.compression=int8"}, "set parallel.compression = \"none\""},
      {{"parallel.grad_mixing=adasum", "train.device=cuda"}, "set train.device = \"cpu\""},
      {{"parallel.grad_mixing=adasum", "parallel.zero_stage=2"}, "parallel.zero_stage = 0"},
      {{"parallel.grad_mixing=adasum", "parallel.grad_reduce=sum"}, "set only parallel.grad_mixing"},
      {{"parallel.topk_ratio=0"}, "parallel.topk_ratio"},
      {{"parallel.topk_ratio=1.5"}, "parallel.topk_ratio"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.overrides);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "overrides " << c.overrides[0] << ": " << e;
  }
}

TEST(CommunicationConfig, AdaSumNeedsPowerOfTwoDataRanks) {
  auto c = parse_train_config(kTiny, "test.toml", {"parallel.grad_mixing=adasum"});
  EXPECT_NO_THROW(train::parallel_layout(c, 4));
  try {
    train::parallel_layout(c, 6);
    FAIL() << "6 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power-of-two number of data-parallel ranks, not 6"), std::string::npos)
        << e.what();
  }
}

// GPU ranks run the hand-written algorithms over NCCL only, not MPI with host staging.
TEST(CommunicationConfig, MpiGpuCommunicatorRefusesHandWrittenAlgorithms) {
  parallel::CommOptions o;
  o.kind = "mpi";
  o.device = "cuda";
  o.allreduce = "hierarchical";
  try {
    parallel::make_communicator(o);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use parallel.communicator = \"nccl\""), std::string::npos)
        << e.what();
  }
}

// The parameter-server keys (parallel.parameter_servers, max_staleness).

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
