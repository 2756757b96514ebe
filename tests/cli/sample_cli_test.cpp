// aiscale sample on a tiny trained run (byte tokenizer): one stream printed as it is
// generated, batches as JSON lines, the seed, stop sequences, a prompts file, the
// checkpoint's own model against edited configs, and bad options; aiscale bench sample.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

// stdout only (the checkpoint line and the timing go to stderr).
RunOutput sample(const std::string& args) {
  return run_command("(" + std::string(AISCALE_BINARY) + " sample " + args + " 2>/dev/null)");
}

class SampleCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("sample-cli");
    write_byte_shards(dir_);
    const std::string cfg = tiny_config(dir_);
    auto r = run_aiscale("train -q -c " + cfg + " --set run.name=tiny train.steps=30");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    run_ = (dir_ / "runs/tiny").string();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path dir_;
  static std::string run_;
};
fs::path SampleCli::dir_;
std::string SampleCli::run_;

TEST_F(SampleCli, OneStreamPrintsThePromptThenItsTokens) {
  auto r = run_aiscale("sample --run " + run_ + " --prompt 'the ' --tokens 12 --min-tokens 12 "
                       "--temperature 0 --print-ids");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nthe "), std::string::npos) << r.output;  // after the checkpoint line
  EXPECT_NE(r.output.find("sample: 12 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ids: ["), std::string::npos) << r.output;
}

TEST_F(SampleCli, BatchesAsJsonLinesAndTheSameSeedGivesTheSameText) {
  const std::string args = "--run " + run_ + " -p 'the ' -p 'a cat' --samples 2 --tokens 16 "
                           "--min-tokens 16 --top-k 10 --top-p 0.9 --jsonl --batch 3";
  auto a = sample(args + " --seed 3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto lines = json_lines(a.output);
  ASSERT_EQ(lines.size(), 4u) << a.output;
  std::set<int64_t> indices;
  for (const auto& j : lines) {
    const int64_t i = j.at("index").get<int64_t>();
    indices.insert(i);
    EXPECT_EQ(j.at("prompt"), i < 2 ? "the " : "a cat");
    EXPECT_EQ(j.at("tokens"), 16);
    EXPECT_EQ(j.at("ids").size(), 16u);
    EXPECT_EQ(j.at("stop_reason"), "length");
  }
  EXPECT_EQ(indices, (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sample(args + " --seed 3").output, a.output);
  EXPECT_NE(sample(args + " --seed 4").output, a.output);
  // Several streams without --jsonl: each printed with a header when it ends.
  auto text = sample("--run " + run_ + " -p 'the ' -p 'a cat' --tokens 8 --min-tokens 8");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("--- 1/2 (prompt 1): 8 tokens, length ---\nthe "), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("--- 2/2 (prompt 2): 8 tokens, length ---\na cat"), std::string::npos)
      << text.output;
}

TEST_F(SampleCli, StopSequenceEndsTheTextBeforeIt) {
  const std::string args = "--run " + run_ + " -p 'the ' --tokens 40 --min-tokens 40 "
                           "--temperature 0 --jsonl";
  auto greedy_run = sample(args);
  ASSERT_EQ(greedy_run.exit_code, 0) << greedy_run.output;
  const std::string text = json_lines(greedy_run.output).at(0).at("text");
  // Two letters or spaces from the middle of the greedy text: a stop sequence the shell
  // passes as it is.
  std::string stop;
  for (size_t i = 4; i + 2 <= text.size() && stop.empty(); ++i)
    if (std::isalpha(static_cast<unsigned char>(text[i])) &&
        (std::isalpha(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == ' '))
      stop = text.substr(i, 2);
  ASSERT_FALSE(stop.empty()) << text;
  auto r = sample(args + " --stop '" + stop + "' --stop 'zzzzzz'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = json_lines(r.output).at(0);
  EXPECT_EQ(j.at("text"), text.substr(0, text.find(stop)));
  EXPECT_EQ(j.at("stop_reason"), "stop_sequence");
  EXPECT_EQ(j.at("stop_sequence"), stop);
  // Printed as it is generated, the stop text never shows.
  auto live = sample("--run " + run_ + " -p 'the ' --tokens 40 --min-tokens 40 --temperature 0 "
                     "--stop '" + stop + "'");
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_EQ(live.output, "the " + text.substr(0, text.find(stop)) + "\n");
}

TEST_F(SampleCli, PromptsFileOnePerLine) {
  const fs::path file = dir_ / "prompts.txt";
  std::ofstream(file) << "the cat\r\n\nsat on\n";
  auto r = sample("--run " + run_ + " -p 'a ' --prompts-file " + file.string() +
                  " --tokens 4 --min-tokens 4 --jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = json_lines(r.output);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  std::set<std::string> prompts;
  for (const auto& j : lines) prompts.insert(j.at("prompt").get<std::string>());
  EXPECT_EQ(prompts, (std::set<std::string>{"a ", "the cat", "sat on"}));
  std::ofstream(dir_ / "empty.txt") << "\n\n";
  auto empty = run_aiscale("sample --run " + run_ + " --prompts-file " + (dir_ / "empty.txt").string());
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_NE(empty.output.find("holds no prompt"), std::string::npos) << empty.output;
}

TEST_F(SampleCli, EditedCheckpointConfigIsRefusedNamingBothShapes) {
  // config.json with another head count: every tensor keeps its shape, so only the state
  // the checkpoint was saved with can tell that it is another model.
  const fs::path copy = dir_ / "edited_ckpt";
  fs::remove_all(copy);
  fs::copy(*train::latest_checkpoint(run_ + "/checkpoints"), copy, fs::copy_options::recursive);
  auto hf = nlohmann::json::parse(read_bytes(copy / "config.json"));
  ASSERT_EQ(hf.at("n_head"), 2);
  hf["n_head"] = 4;
  std::ofstream(copy / "config.json") << hf.dump(2);
  auto r = run_aiscale("sample --checkpoint " + copy.string() + " --tokens 4");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n_head=4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n_head=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("state.json"), std::string::npos) << r.output;
}

TEST_F(SampleCli, EditedRunConfigWarnsAndSamplesTheCheckpointsModel) {
  const fs::path copy = dir_ / "edited_run";
  fs::remove_all(copy);
  fs::copy(run_, copy, fs::copy_options::recursive);
  std::string toml = read_bytes(copy / "config.toml");
  const size_t at = toml.find("n_layer = 2");
  ASSERT_NE(at, std::string::npos) << toml;
  toml.replace(at, 11, "n_layer = 3");
  std::ofstream(copy / "config.toml") << toml;
  auto edited = run_aiscale("sample --run " + copy.string() + " -p 'the ' --tokens 8 --temperature 0");
  ASSERT_EQ(edited.exit_code, 0) << edited.output;
  EXPECT_NE(edited.output.find("n_layer=3"), std::string::npos) << edited.output;
  EXPECT_NE(edited.output.find("sampling the checkpoint's model"), std::string::npos) << edited.output;
  // The same text as from the unedited run.
  EXPECT_EQ(sample("--run " + copy.string() + " -p 'the ' --tokens 8 --temperature 0").output,
            sample("--run " + run_ + " -p 'the ' --tokens 8 --temperature 0").output);
}

TEST_F(SampleCli, BadOptionsAreNamed) {
  const std::string base = "sample --run " + run_ + " ";
  for (auto [args, names] : {std::pair{"--top-p 0", "--top-p"}, {"--top-p 1.5", "--top-p"},
                             {"--stop ''", "--stop"}, {"--context 1000", "--context"},
                             {"--tokens 0", "--tokens"},
                             {"--prompts-file /nonexistent/prompts.txt", "/nonexistent/prompts.txt"}}) {
    auto r = run_aiscale(base + args);
    EXPECT_NE(r.exit_code, 0) << args << r.output;
    EXPECT_NE(r.output.find(names), std::string::npos) << args << r.output;
    EXPECT_LT(r.output.size(), 2000u) << r.output;
  }
}

TEST(BenchSample, RecordsPrefillAndDecodeThroughput) {
  auto r = run_aiscale("bench sample --model gpt-tiny --streams 3 --prompt-len 8 --tokens 6 "
                       "--warmup 1 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = json_lines(r.output);
  ASSERT_EQ(lines.size(), 1u) << r.output;
  const auto& j = lines[0];
  EXPECT_EQ(j.at("benchmark"), "sample");
  EXPECT_EQ(j.at("streams"), 3);
  EXPECT_EQ(j.at("threads"), 1);
  EXPECT_GT(j.at("prefill_tokens_per_s").get<double>(), 0.0);
  const double total = j.at("decode_tokens_per_s"), per_stream = j.at("decode_tokens_per_s_per_stream");
  EXPECT_NEAR(total, 3 * per_stream, 1e-6 * total);
  EXPECT_EQ(j.at("cache_bytes"), 2 * 3 * 2 * 64 * 64 * 4);  // streams x layers x context x C
  auto over = run_aiscale("bench sample --model gpt-tiny --prompt-len 60 --tokens 10");
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE(over.output.find("--prompt-len"), std::string::npos) << over.output;
}

}  // namespace
