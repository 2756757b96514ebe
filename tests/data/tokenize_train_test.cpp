// End to end: a gzip'd JSONL corpus tokenized with GPT-2 written as a tokenizer.json
// (scripts/make_gpt2_tokenizer_json.py), then `aiscale train` on the shards for a few
// steps on the CPU, then `aiscale sample` decoding with the run's data.tokenizer.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cmath>
#include <fstream>
#include <string>

#include "aiscale/data/token_shard.h"
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

}  // namespace
