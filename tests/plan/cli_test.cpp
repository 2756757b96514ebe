// `aiscale plan` end to end: the binary's output, JSON and exit status for mistakes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "../support/run_support.h"

namespace aiscale {
namespace {
using testsupport::run_aiscale;

TEST(PlanCli, RankedPlanPrintsFormulaTableAndRoute) {
  const auto r = run_aiscale("plan --model gpt2-1558m --tokens 10e9 --system leonardo --explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("N = 1,557,611,200"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("6·N·D + 12·L·d·T·D"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("leonardo/booster"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Playground"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("datasheet"), std::string::npos) << r.output;
}

TEST(PlanCli, JsonAndSystemsAndScaling) {
  auto r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system jupiter --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["workload"]["params"].get<int64_t>(), 124439808);
  EXPECT_EQ(j["ranked"].size(), 1u);
  r = run_aiscale("plan systems --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(nlohmann::json::parse(r.output)["systems"].size(), 15u);
  r = run_aiscale("plan scaling --system leonardo --model gpt2-124m --max-nodes 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Strong scaling"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Weak scaling"), std::string::npos) << r.output;
}

TEST(PlanCli, EpochOptionsReachTheExplanationAndJson) {
  auto r = run_aiscale(
      "plan --model resnet50 --system leonardo --include-unsupported --explain --decode-rate 400 "
      "--validation-samples 20000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("per training part"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("given with --decode-rate"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("20,000 samples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stragglers"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-124m --tokens 4e9 --system jupiter --samples-per-epoch 976562.5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_NEAR(j["ranked"][0]["epoch"]["epochs"].get<double>(), 4.0, 1e-9);
  EXPECT_TRUE(j["ranked"][0]["epoch"]["efficiency"].contains("per_epoch"));
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --validation-samples 10 --validation-fraction 0.1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--validation-samples or --validation-fraction"), std::string::npos) << r.output;
}

TEST(PlanCli, MistakesExitOneWithAnExplanation) {
  auto r = run_aiscale("plan --model nosuchmodel --tokens 1e9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown model 'nosuchmodel'"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-1558m --tokens 1e9 --tp 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("impossible layout"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-1558m --tokens 1e9 --system nowhere");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown system 'nowhere'"), std::string::npos) << r.output;
  // Too little memory is a plan with a reason, not a crash.
  r = run_aiscale("plan --model gpt3-175b --tokens 1e9 --system vega --gpus 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("does not fit in memory"), std::string::npos) << r.output;
}

TEST(PlanCli, AttentionOptionIsPrintedAndChecked) {
  auto r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system jupiter --explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("flash on GPU partitions"), std::string::npos) << r.output;
  std::string flat;  // the output with wrapped lines joined
  for (size_t i = 0; i < r.output.size(); ++i) {
    if (r.output[i] == '\n') {
      while (i + 1 < r.output.size() && r.output[i + 1] == ' ') ++i;
      flat += ' ';
    } else {
      flat += r.output[i];
    }
  }
  EXPECT_NE(flat.find("(flash attention: no score matrices)"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system jupiter --attention materialized --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["workload"]["attention"], "materialized");
  EXPECT_EQ(j["ranked"][0]["attention"], "materialized");
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --attention sparse");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown attention 'sparse'"), std::string::npos) << r.output;
  r = run_aiscale("plan --model resnet50 --attention flash");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--attention applies to transformer models only"), std::string::npos) << r.output;
}

TEST(PlanCli, GradTransportOptionIsPrintedAndChecked) {
  auto r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 "
                       "--grad-transport copy-engine --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["request"]["grad_transport"], "copy-engine");
  EXPECT_EQ(j["ranked"][0]["layout"]["grad_transport"], "copy-engine");
  EXPECT_GT(j["assumptions"]["copy_engine_slowdown"].get<double>(), 0.0);
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 8 "
                  "--grad-transport copy-engine");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("works inside one node"), std::string::npos) << r.output;
  // Checked as the option shared with train and bench (its choices are the config key's).
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --grad-transport dma");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--grad-transport: dma not in {auto,nccl,copy-engine}"), std::string::npos) << r.output;
  // Without the option ("auto"): the copy engines on one Hopper node, NCCL across nodes
  // and on other GPUs (Leonardo's A100s), as `aiscale train` chooses.
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto k = nlohmann::json::parse(r.output);
  EXPECT_EQ(k["request"]["grad_transport"], "auto");
  EXPECT_EQ(k["ranked"][0]["layout"]["grad_transport"], "nccl");
}

TEST(PlanCli, CpuPartitionGetsARankedLayoutInFp32) {
  auto r = run_aiscale("plan --model gpt2-124m --tokens 1e8 --system karolina/cpu --explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("precision      fp32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("karolina/cpu ²"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CPU nodes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node-hours"), std::string::npos) << r.output;
  // bf16 asked for explicitly: explained, not a crash.
  r = run_aiscale("plan --model gpt2-124m --tokens 1e8 --system karolina/cpu --precision bf16");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Not planned"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--precision fp32"), std::string::npos) << r.output;
  r = run_aiscale("plan systems");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("EPYC-7763"), std::string::npos) << r.output;
}

// The default output: a compact table under 120 columns, with everything else wrapped.
TEST(PlanCli, DefaultOutputIsCompact) {
  for (const char* cmd : {"plan --model gpt2-350m --tokens 10e9",
                          "plan --model gpt2-350m --tokens 10e9 --include-unsupported",
                          "plan --model resnet50", "plan --model gpt2-124m --tokens 2e9 --explain"}) {
    const auto r = run_aiscale(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    size_t start = 0;
    while (start < r.output.size()) {
      size_t end = r.output.find('\n', start);
      if (end == std::string::npos) end = r.output.size();
      const std::string line = r.output.substr(start, end - start);
      size_t cols = 0;
      for (unsigned char c : line) cols += (c & 0xC0) != 0x80;
      // A URL cannot be broken; every other line fits.
      if (line.find("http") == std::string::npos) {
        EXPECT_LT(cols, 120u) << cmd << ": " << line;
      }
      start = end + 1;
    }
  }
}

TEST(PlanCli, ResNetRanksDataParallelLayoutsAndIncludeUnsupportedMarksTheRest) {
  // ResNets train on GPUs with plain data parallelism; GPT-3 175B needs tensor and pipeline
  // parallelism together, which GPU ranks do not run: marked with --include-unsupported.
  auto r = run_aiscale("plan --model resnet50 --system leonardo");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("CNN training not implemented"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt3-175b --tokens 300e9 --system leonardo --include-unsupported");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("does not run in `aiscale train` yet"), std::string::npos) << r.output;
}

TEST(PlanCli, RankObjectivesAndDeadline) {
  auto r = run_aiscale("plan --model gpt2-350m --tokens 10e9 --system leonardo --rank smallest "
                       "--deadline 12h --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["ranked"].size(), 1u);
  EXPECT_LE(j["ranked"][0]["seconds"].get<double>(), 12 * 3600.0);
  const long smallest = j["ranked"][0]["layout"]["gpus"].get<long>();
  r = run_aiscale("plan --model gpt2-350m --tokens 10e9 --system leonardo --rank time --json");
  j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["ranked"][0]["layout"]["gpus"].get<long>(), smallest);
  // Impossible deadline: the reason names the fastest the partition can do.
  r = run_aiscale("plan --model gpt2-350m --tokens 10e9 --system leonardo --rank smallest --deadline 1min");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cannot finish within the deadline"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-350m --tokens 10e9 --rank smallest");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("needs --deadline"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-350m --tokens 10e9 --deadline soon");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--deadline = 'soon' is not a duration"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-350m --tokens 10e9 --rank fastest");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--rank must be time, gpu-hours, energy, cost or smallest"), std::string::npos) << r.output;
}

// --precision fp8: planned as the engine runs it, its assumptions said in the text and JSON;
// a ResNet in fp8 is refused with the reason.
TEST(PlanCli, Fp8PlansTheLinearLayersAndSaysHow) {
  auto r = run_aiscale("plan --model gpt2-350m --tokens 1e9 --system marenostrum5 --gpus 4 "
                       "--precision fp8 --explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FP8 (--precision fp8)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fp8 training not implemented"), std::string::npos) << r.output;
  r = run_aiscale("plan --model gpt2-350m --tokens 1e9 --system marenostrum5 --gpus 4 "
                  "--precision fp8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_DOUBLE_EQ(j["assumptions"]["fp8_gemm_speedup"].get<double>(), 1.5);
  ASSERT_FALSE(j["ranked"].empty());
  EXPECT_TRUE(j["ranked"][0]["runs_in_aiscale_train"].get<bool>());
  r = run_aiscale("plan --model resnet50 --epochs 1 --system marenostrum5 --gpus 4 --precision fp8");
  EXPECT_NE(r.output.find("fp8 training runs the transformers' linear layers only"),
            std::string::npos) << r.output;
}

TEST(PlanCli, LlamaPresetsAndCustomLlamaShapes) {
  // Llama 3 8B on one node of four H100s: its shape, origin, exact parameters and the
  // untied input embedding left out of N.
  auto r = run_aiscale(
      "plan --model llama3-8b-shape --tokens 1e9 --system marenostrum5 --gpus 4 "
      "--include-unsupported --explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("32 heads (8 key/value)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Llama 3.1 8B shape (Meta's config.json)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("N = 8,030,261,248"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("6 × 7,504,924,672 × "), std::string::npos) << r.output;
  // GPU ranks train the llama family: its best layout is runnable.
  EXPECT_EQ(r.output.find("Llama-family training not implemented"), std::string::npos) << r.output;
  // llama-tiny's shape given by hand through --model custom: the same parameter count.
  r = run_aiscale(
      "plan --model custom --family llama --n-layer 2 --n-head 4 --n-embd 64 --n-kv-head 2 "
      "--ffn-hidden 176 --vocab-size 256 --tie-embeddings false --seq-len 64 --tokens 1e6 "
      "--system jupiter --include-unsupported --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["workload"]["params"].get<int64_t>(), 125248);
  EXPECT_EQ(j["workload"]["family"].get<std::string>(), "llama");
  EXPECT_EQ(j["workload"]["n_kv_head"].get<int64_t>(), 2);
  EXPECT_FALSE(j["workload"]["tie_embeddings"].get<bool>());
  // Mistakes: Llama options on a GPT-2 model, an unknown family, a tensor size the
  // key/value heads do not allow.
  r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --n-kv-head 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--n-kv-head"), std::string::npos) << r.output;
  r = run_aiscale("plan --model custom --family mamba --n-layer 2 --n-head 4 --n-embd 64 --tokens 1e9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--family mamba is unknown"), std::string::npos) << r.output;
  r = run_aiscale("plan --model llama3-8b-shape --tokens 1e9 --tp 16 --include-unsupported");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("8 key/value heads"), std::string::npos) << r.output;
  // The optimizer offloaded: marked in the table, its host memory and assumptions stated.
  r = run_aiscale(
      "plan --model gpt2-1558m --tokens 1e9 --system marenostrum5 --gpus 4 --offload-optimizer "
      "--explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Z3 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optimizer offloaded"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offloaded to host memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("over PCIe"), std::string::npos) << r.output;
  r = run_aiscale("plan --model llama3-8b-shape --tokens 1e9 --tie-embeddings maybe");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--tie-embeddings maybe is invalid"), std::string::npos) << r.output;
}

// --price and --rank cost: a cost column, refused names and a cost ranking without prices.
TEST(PlanCli, PricesAddACostColumnAndRankByCost) {
  auto r = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system leonardo --system jupiter --rank cost "
                       "--price jupiter/booster=2.5 --price leonardo=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Ranked by cost"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" cost "), std::string::npos) << r.output;
  const std::string leonardo = "plan --model gpt2-124m --tokens 1e9 --system leonardo ";
  for (const auto& [options, message] : std::vector<std::pair<std::string, std::string>>{
           {"--rank cost", "--rank cost needs what a GPU-hour costs"},
           {"--price lumi=1", "'lumi' is none of the partitions planned"},
           {"--price leonardo=-1", "--price leonardo"}}) {
    r = run_aiscale(leonardo + options);
    EXPECT_EQ(r.exit_code, 1) << options;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
  r = run_aiscale(leonardo + "--price leonardo=2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_TRUE(j.dump().find("\"cost\":") != std::string::npos) << r.output.substr(0, 400);
}

}  // namespace
}  // namespace aiscale
