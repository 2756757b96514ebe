// The host data-parallel wrappers on ranks as threads: ZeRO-1 over 3 ranks (every bucket
// padded to a multiple of 3) takes the same steps as DDP, bit for bit, holds a third of its
// optimizer state, and gathers that state whole for checkpoints; one rank is DDP without an
// exchange.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/param_tensor.h"
#include "aiscale/optim/sgd.h"
#include "aiscale/optim/data_parallel.h"
#include "../parallel/in_process_ranks.h"

namespace aiscale {
namespace {

using namespace testsupport;
namespace dp = optim;

// 15 parameters in three tensors; the gradients are set by the test.
struct ToyModel {
  ToyModel() : params_(15), grads_(15) {
    tensors_ = {{"a.weight", {5}, 0, 5, true}, {"a.bias", {7}, 5, 7, false}, {"b.weight", {3}, 12, 3, true}};
    for (size_t i = 0; i < params_.size(); ++i) params_[i] = 0.1f * float(i + 1);
  }
  optim::HostModel view() { return {params_.data(), grads_.data(), 15, &tensors_}; }
  std::vector<float> params_, grads_;
  std::vector<ParamTensor> tensors_;
};

// Rank r's gradient of step s: different on every rank, value and step.
void set_grads(ToyModel& m, int rank, int step) {
  for (size_t i = 0; i < m.grads_.size(); ++i)
    m.grads_[i] = std::sin(0.7f * float(i) + 1.3f * float(rank) + 0.4f * float(step));
}

dp::HostDataParallelOptions small_buckets() {
  dp::HostDataParallelOptions o;
  o.bucket_mib = 2.0 * 4 / 1048576;  // 2 values: each tensor a bucket of its own
  return o;
}

void ddp_and_zero1_agree(const dp::OptimizerFactory& optimizer, const std::string& what) {
  const int world = 3;
  Fabric fabric;
  std::vector<std::vector<float>> ddp_params(world), zero_params(world), zero_state(world);
  std::vector<size_t> ddp_bytes(world), zero_bytes(world);
  std::vector<std::vector<float>> ddp_state(world);
  run_ranks(world, [&](int rank) {
    ThreadComm comm(fabric, rank, world);
    ToyModel a, b;
    auto ddp = dp::make_host_ddp(a.view(), &comm, optimizer, small_buckets());
    auto zero1 = dp::make_host_data_parallel(1, b.view(), &comm, optimizer, small_buckets());
    EXPECT_EQ(ddp->name(), "ddp");
    EXPECT_EQ(zero1->name(), "zero1");
    EXPECT_EQ(zero1->divisor(), 3.0);
    for (int step = 0; step < 4; ++step) {
      set_grads(a, rank, step);
      set_grads(b, rank, step);
      ddp->reduce_gradients();
      zero1->reduce_gradients();
      optim::StepParams p;
      p.lr = 0.05;
      p.step = step + 1;
      p.grad_scale = 1.0f / 3.0f;
      ddp->step(p);
      zero1->step(p);
    }
    ddp_params[rank] = a.params_;
    zero_params[rank] = b.params_;
    ddp_bytes[rank] = ddp->optimizer_state_bytes();
    zero_bytes[rank] = zero1->optimizer_state_bytes();
    ddp_state[rank].resize(15);
    zero_state[rank].resize(15);
    ddp->get_state(0, ddp_state[rank].data());
    zero1->get_state(0, zero_state[rank].data());  // a collective: every rank gathers
  });
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < 15; ++i) {
      EXPECT_EQ(zero_params[r][i], ddp_params[r][i]) << what << " rank " << r << " value " << i;
      EXPECT_EQ(zero_state[r][i], ddp_state[r][i]) << what << " state, rank " << r << " value " << i;
      EXPECT_EQ(ddp_params[r][i], ddp_params[0][i]) << what << " ranks disagree at " << i;
    }
    // Buckets of 3, 7 and 5 values split 3 ways: 1 + 3 + 2 = 6 values a rank, of 15.
    EXPECT_EQ(zero_bytes[r] * 15, ddp_bytes[r] * 6) << what;
  }
  EXPECT_NE(ddp_params[0][0], 0.1f) << what << ": the parameters moved";
}

TEST(HostWrappers, ZeroOneOnThreeRanksTakesDdpsStepsWithAThirdOfTheState) {
  const std::vector<ParamTensor> tensors = ToyModel().tensors_;
  optim::AdamWOptions ao;
  ao.weight_decay = 0.1;
  ddp_and_zero1_agree([&](int64_t n) { return optim::make_adamw(n, ao, tensors); }, "adamw");
  const std::vector<uint8_t> decay = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1};
  ddp_and_zero1_agree(
      [&](int64_t n) { return std::make_unique<optim::Sgd>(n, optim::SgdOptions{0.9, true, 1e-2}, decay); },
      "sgd");
}

TEST(HostWrappers, OneRankIsDdpWithoutAnExchange) {
  ToyModel m;
  auto one = dp::make_host_ddp(m.view(), nullptr, [](int64_t n) {
    return std::make_unique<optim::Sgd>(n, optim::SgdOptions{0.0, false, 0.0});
  }, {});
  set_grads(m, 0, 0);
  const std::vector<float> before = m.params_, grads = m.grads_;
  one->reduce_gradients();
  EXPECT_EQ(m.grads_, grads);  // nothing summed
  EXPECT_EQ(one->divisor(), 1.0);
  EXPECT_FALSE(one->collective_state());
  optim::StepParams p;
  p.lr = 0.5;
  one->step(p);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(m.params_[i], before[i] - 0.5f * grads[i]);
  EXPECT_EQ(one->describe()["data_parallel"], "ddp");
}

TEST(HostWrappers, ZeroOneRefusesAdaSumAndCompression) {
  Fabric fabric;
  run_ranks(2, [&](int rank) {
    ThreadComm comm(fabric, rank, 2);
    ToyModel m;
    dp::HostDataParallelOptions o;
    o.exchange.compression = "topk";
    try {
      dp::make_host_data_parallel(1, m.view(), &comm, [](int64_t n) {
        return std::make_unique<optim::Sgd>(n, optim::SgdOptions{});
      }, o);
      ADD_FAILURE() << "compression accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.compression"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace aiscale
