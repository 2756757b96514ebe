// End to end: a gzip'd JSONL corpus tokenized with GPT-2 written as a tokenizer.json
// (scripts/make_gpt2_tokenizer_json.py), then `aiscale train` on the shards for a few
// steps on the CPU, then `aiscale sample` decoding with the run's data.tokenizer.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cmath>
#include <fstream>
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/data/token_shard.h"
#include "aiscale/train/config.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

TEST(TokenizeThenTrain, GzipJsonlWithTokenizerJsonTrainsATinyGpt) {
  const fs::path dir = temp_dir("tokenize-train");
  const fs::path tokenizer = dir / "gpt2_tokenizer.json";
  auto r = run_command("python3 " + std::string(AISCALE_SOURCE_DIR) +
                       "/scripts/make_gpt2_tokenizer_json.py " + tokenizer.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // 400 short documents with structure a model picks up in a few steps.
  fs::create_directories(dir / "corpus" / "part");
  gzFile out = gzopen((dir / "corpus" / "part" / "docs.jsonl.gz").c_str(), "wb");
  ASSERT_NE(out, nullptr);
  const char* animals[] = {"cat", "dog", "bird", "fish"};
  for (int i = 0; i < 400; ++i) {
    const std::string a = animals[i % 4], b = animals[(i / 4) % 4];
    const std::string line = "{\"id\": " + std::to_string(i) + ", \"text\": \"The " + a +
                             " sat on the mat. The " + b + " ran to the " + a + ".\\n\"}\n";
    gzwrite(out, line.data(), static_cast<unsigned>(line.size()));
  }
  ASSERT_EQ(gzclose(out), Z_OK);

  r = run_aiscale("data tokenize --input " + (dir / "corpus").string() + " --output-prefix " +
                  (dir / "shards" / "animals").string() + " --tokenizer " + tokenizer.string() +
                  " --val-fraction 0.1 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("documents: 400 (360 train, 40 val)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MB/s of text"), std::string::npos) << r.output;
  const auto ids = data::read_token_ids(dir / "shards" / "animals_train_000000.bin");
  ASSERT_GT(ids.size(), 360u * 10);
  EXPECT_EQ(ids[0], 50256);
  EXPECT_EQ(ids[1], 464);  // "The"

  const std::string config =
      "[model]\npreset = \"gpt-tiny\"\nvocab_size = 50257\nblock_size = 32\n"
      "[data]\ntrain = \"" + (dir / "shards" / "animals_train_*.bin").string() + "\"\n"
      "val = \"" + (dir / "shards" / "animals_val_*.bin").string() + "\"\n"
      "tokenizer = \"" + tokenizer.string() + "\"\n"
      "[train]\nbatch_size = 4\nseq_len = 32\nsteps = 8\nwarmup_steps = 1\nlr = 3e-3\n"
      "threads = 2\neval_batches = 1\n"
      "[run]\ndir = \"" + (dir / "runs").string() + "\"\nname = \"animals\"\n";
  std::ofstream(dir / "animals.toml") << config;
  r = run_aiscale("train -q -c " + (dir / "animals.toml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto metrics = read_metrics(dir / "runs" / "animals");
  std::vector<double> losses;
  for (const auto& m : metrics)
    if (m.contains("loss")) losses.push_back(m["loss"].get<double>());
  ASSERT_EQ(losses.size(), 8u) << r.output;
  EXPECT_NEAR(losses.front(), std::log(50257.0), 1.0);  // a fresh model guesses uniformly
  EXPECT_LT(losses.back(), losses.front() - 1.0);

  r = run_command("(" + std::string(AISCALE_BINARY) + " sample --run " + (dir / "runs" / "animals").string() +
                  " --prompt 'The cat' --tokens 4 --min-tokens 4 --temperature 0 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("The cat"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// 32-bit shards (ids above 65535) train like 16-bit ones, and a model whose vocabulary
// is too small for them is refused before the first step, naming the shard.
TEST(TokenizeThenTrain, Uint32ShardsTrainAndTooSmallVocabularyIsRefused) {
  const fs::path dir = temp_dir("wide-train");
  for (auto [name, n] : {std::pair{"wide_train_000000.bin", 6000}, std::pair{"wide_val_000000.bin", 600}}) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[i] = 66000 + (i * 7 + i / 5) % 13;  // a learnable pattern
    data::write_token_shard(dir / name, std::span<const int32_t>(ids), 66100);
  }
  ASSERT_EQ(data::read_shard_header(dir / "wide_train_000000.bin").version, 2);
  const auto config = [&](int vocab) {
    const std::string text =
        "[model]\npreset = \"gpt-tiny\"\nvocab_size = " + std::to_string(vocab) + "\nblock_size = 32\n"
        "[data]\ntrain = \"" + (dir / "wide_train_*.bin").string() + "\"\n"
        "val = \"" + (dir / "wide_val_*.bin").string() + "\"\n"
        "[train]\nbatch_size = 4\nseq_len = 32\nsteps = 6\nwarmup_steps = 1\nlr = 3e-3\n"
        "threads = 2\neval_batches = 1\n[run]\ndir = \"" + (dir / "runs").string() + "\"\n";
    std::ofstream(dir / "wide.toml") << text;
    return (dir / "wide.toml").string();
  };
  auto r = run_aiscale("train -q -c " + config(66100) + " --set run.name=ok");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> losses;
  for (const auto& m : read_metrics(dir / "runs" / "ok"))
    if (m.contains("loss")) losses.push_back(m["loss"].get<double>());
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_LT(losses.back(), losses.front() - 0.5);
  r = run_aiscale("train -q -c " + config(66005) + " --set run.name=small");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("wide_train_000000.bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.vocab_size = 66013"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(TokenizerConfigKey, NamesAndFilesOnly) {
  EXPECT_EQ(train::parse_train_config("[data]\ntokenizer = \"m/tokenizer.json\"\n", "t.toml", {}).tokenizer,
            "m/tokenizer.json");
  EXPECT_EQ(train::parse_train_config("[data]\ntokenizer = \"sp.model\"\n", "t.toml", {}).tokenizer, "sp.model");
  try {
    train::parse_train_config("[data]\ntokenizer = \"llama\"\n", "t.toml", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.tokenizer' = 'llama'"), std::string::npos) << e.what();
  }
}

}  // namespace
