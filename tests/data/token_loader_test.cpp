// The distributed token loader: windows, determinism, shuffling, rank partitioning,
// resume, globbing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/data/token_loader.h"
#include "aiscale/data/token_shard.h"

namespace aiscale::data {
namespace {

// Shards whose token at stream position p is p (mod 65536), so a window's first input
// token tells where it starts.
class TokenLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aiscale_loader_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes shards of the given sizes as dir/name_train_00000i.bin; returns the glob.
  std::string make_shards(const std::vector<int64_t>& sizes, const std::string& name = "x") {
    int64_t position = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint16_t> tokens(sizes[i]);
      for (auto& token : tokens) token = static_cast<uint16_t>(position++ % 65536);
      write_token_shard(dir_ / fmt::format("{}_train_{:06d}.bin", name, i),
                        std::span<const uint16_t>(tokens));
    }
    return (dir_ / (name + "_train_*.bin")).string();
  }

  // Start positions of the windows of the next `batches` batches, with a check that
  // inputs and targets are the T+1 consecutive stream tokens.
  static std::vector<int64_t> starts(TokenLoader& loader, int64_t batches) {
    const int64_t B = loader.batch_size(), T = loader.seq_len();
    std::vector<int32_t> inputs(B * T), targets(B * T);
    std::vector<int64_t> result;
    for (int64_t k = 0; k < batches; ++k) {
      loader.next_batch(inputs.data(), targets.data());
      for (int64_t j = 0; j < B; ++j) {
        const int32_t start = inputs[j * T];
        for (int64_t t = 0; t < T; ++t) {
          EXPECT_EQ(inputs[j * T + t], (start + t) % 65536);
          EXPECT_EQ(targets[j * T + t], (start + t + 1) % 65536);
        }
        result.push_back(start);
      }
    }
    return result;
  }

  std::filesystem::path dir_;
};

TEST_F(TokenLoaderTest, SequentialWindowsAcrossShardBoundaries) {
  // 37 tokens in three shards; T = 4 gives (37-1)/4 = 9 windows at stride 4.
  const std::string glob = make_shards({10, 7, 20});
  TokenLoader loader(glob, 2, 4, 0, 1, 0, false);
  EXPECT_EQ(loader.total_tokens(), 37);
  EXPECT_EQ(loader.windows_per_epoch(), 9);
  EXPECT_EQ(loader.batches_per_epoch(), 4);  // the 9th window is left over
  EXPECT_EQ(loader.shard_paths().size(), 3u);
  EXPECT_EQ(starts(loader, 4), (std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24, 28}));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.position(), (TokenLoader::Position{1, 0}));
  EXPECT_EQ(starts(loader, 1), (std::vector<int64_t>{0, 4}));  // unshuffled: same again
}

TEST_F(TokenLoaderTest, ExplicitPathListKeepsOrder) {
  make_shards({10, 10});
  TokenLoaderConfig config;
  config.shards = {(dir_ / "x_train_000000.bin").string(), (dir_ / "x_train_000001.bin").string()};
  config.batch_size = 1;
  config.seq_len = 5;
  config.shuffle = false;
  TokenLoader loader(config);
  EXPECT_EQ(starts(loader, 3), (std::vector<int64_t>{0, 5, 10}));
}

TEST_F(TokenLoaderTest, Deterministic) {
  const std::string glob = make_shards({3000, 2000});
  TokenLoader a(glob, 4, 16, 0, 1, 1234, true), b(glob, 4, 16, 0, 1, 1234, true);
  TokenLoader other_seed(glob, 4, 16, 0, 1, 99, true);
  const auto sa = starts(a, 40);
  EXPECT_EQ(sa, starts(b, 40));
  EXPECT_NE(sa, starts(other_seed, 40));
}

TEST_F(TokenLoaderTest, EachEpochIsAFreshPermutationOfAllWindows) {
  // 4097 tokens, T = 4: 1024 windows; B = 8: 128 batches, none left over.
  const std::string glob = make_shards({4097});
  TokenLoader loader(glob, 8, 4, 0, 1, 7, true);
  ASSERT_EQ(loader.windows_per_epoch(), 1024);
  ASSERT_EQ(loader.batches_per_epoch(), 128);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(loader.epoch(), e);
    epochs.push_back(starts(loader, 128));
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    for (int64_t w = 0; w < 1024; ++w) ASSERT_EQ(sorted[w], 4 * w) << "epoch " << e;
  }
  EXPECT_EQ(loader.epoch(), 3);
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // Shuffled, not merely rotated: few windows stay where the identity would put them.
  int fixed = 0;
  for (int64_t i = 0; i < 1024; ++i) fixed += epochs[0][i] == 4 * i;
  EXPECT_LT(fixed, 20);
}

TEST_F(TokenLoaderTest, PermutationIsABijectionForAnySize) {
  for (int64_t n : {1, 2, 3, 5, 17, 64, 100, 1000, 4099}) {
    const std::string glob = make_shards({n * 3 + 1}, "n" + std::to_string(n));
    TokenLoader loader(glob, 1, 3, 0, 1, 42, true);
    ASSERT_EQ(loader.windows_per_epoch(), n);
    for (int64_t epoch : {0, 1, 5}) {
      std::set<int64_t> seen;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t w = loader.window_at(epoch, i);
        ASSERT_GE(w, 0);
        ASSERT_LT(w, n);
        seen.insert(w);
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "n " << n << " epoch " << epoch;
    }
  }
}

// One rank with 2B and two ranks with B see the same windows in each global batch;
// rank 0 the first B of them, rank 1 the next B. Also across epoch boundaries.
TEST_F(TokenLoaderTest, RanksPartitionEachGlobalBatch) {
  const std::string glob = make_shards({5000, 3001});  // 8001 tokens, T = 8: 1000 windows
  const int64_t B = 3, T = 8;
  for (bool shuffle : {true, false}) {
    TokenLoader single(glob, 2 * B, T, 0, 1, 5, shuffle);
    TokenLoader rank0(glob, B, T, 0, 2, 5, shuffle), rank1(glob, B, T, 1, 2, 5, shuffle);
    ASSERT_EQ(single.batches_per_epoch(), 166);
    ASSERT_EQ(rank0.batches_per_epoch(), 166);
    for (int64_t k = 0; k < 400; ++k) {  // more than two epochs
      const auto whole = starts(single, 1);
      const auto part0 = starts(rank0, 1), part1 = starts(rank1, 1);
      ASSERT_EQ(std::vector<int64_t>(whole.begin(), whole.begin() + B), part0) << "batch " << k;
      ASSERT_EQ(std::vector<int64_t>(whole.begin() + B, whole.end()), part1) << "batch " << k;
    }
    EXPECT_EQ(single.position(), rank0.position());
    EXPECT_EQ(rank0.position(), rank1.position());
  }
}

TEST_F(TokenLoaderTest, RanksSeeDisjointWindows) {
  const std::string glob = make_shards({4097});
  std::set<int64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    TokenLoader loader(glob, 2, 4, rank, 4, 3, true);
    ASSERT_EQ(loader.batches_per_epoch(), 128);
    for (int64_t start : starts(loader, 128)) EXPECT_TRUE(seen.insert(start).second) << start;
  }
  EXPECT_EQ(seen.size(), 1024u);
}

TEST_F(TokenLoaderTest, PositionSaveAndRestoreResumesExactly) {
  const std::string glob = make_shards({2049});  // 512 windows of T = 4; B = 8: 64 batches
  TokenLoader original(glob, 8, 4, 0, 1, 11, true);
  starts(original, 100);  // into epoch 1
  const TokenLoader::Position saved = original.position();
  EXPECT_EQ(saved, (TokenLoader::Position{1, 36 * 8}));  // samples, not batches
  const auto expected = starts(original, 50);

  TokenLoader resumed(glob, 8, 4, 0, 1, 11, true);
  resumed.restore(saved);
  EXPECT_EQ(resumed.epoch(), 1);
  EXPECT_EQ(starts(resumed, 50), expected);

  // The end of an epoch is the start of the next one, and so is a position with fewer
  // windows left than a global batch takes.
  resumed.restore({2, 512});
  EXPECT_EQ(resumed.position(), (TokenLoader::Position{3, 0}));
  resumed.restore({2, 505});
  EXPECT_EQ(resumed.position(), (TokenLoader::Position{3, 0}));
  resumed.restore({2, 504});
  EXPECT_EQ(resumed.position(), (TokenLoader::Position{2, 504}));
  resumed.reset();
  EXPECT_EQ(resumed.position(), (TokenLoader::Position{0, 0}));
  EXPECT_THROW(resumed.restore({0, 513}), Error);
  EXPECT_THROW(resumed.restore({-1, 0}), Error);
}

// The position counts samples of the epoch's order, so a loader of another world size or
// batch size restored at it continues with the same window of the same order: what a run
// resumed in another layout relies on.
TEST_F(TokenLoaderTest, PositionMeansTheSameForAnyGlobalBatch) {
  const std::string glob = make_shards({8001});  // 1000 windows of T = 8
  TokenLoader one(glob, 8, 8, 0, 1, 3, true);
  starts(one, 10);
  const TokenLoader::Position saved = one.position();
  ASSERT_EQ(saved, (TokenLoader::Position{0, 80}));
  const auto next = starts(one, 4);  // windows 80 .. 111 of epoch 0's order
  for (size_t i = 0; i < next.size(); ++i) EXPECT_EQ(next[i], 8 * one.window_at(0, 80 + int64_t(i)));
  // Two ranks with half the batch: rank 0 the first 4 windows of each 8, rank 1 the next.
  TokenLoader rank0(glob, 4, 8, 0, 2, 3, true), rank1(glob, 4, 8, 1, 2, 3, true);
  rank0.restore(saved);
  rank1.restore(saved);
  for (int k = 0; k < 4; ++k) {
    const auto a = starts(rank0, 1), b = starts(rank1, 1);
    EXPECT_EQ(a, std::vector<int64_t>(next.begin() + 8 * k, next.begin() + 8 * k + 4)) << k;
    EXPECT_EQ(b, std::vector<int64_t>(next.begin() + 8 * k + 4, next.begin() + 8 * k + 8)) << k;
  }
  EXPECT_EQ(rank0.position(), (TokenLoader::Position{0, 112}));
  // One rank with a batch of 3 (another global batch): the same windows in the same order.
  TokenLoader three(glob, 3, 8, 0, 1, 3, true);
  three.restore(saved);
  const auto by_three = starts(three, 11);  // 33 windows
  EXPECT_EQ(std::vector<int64_t>(by_three.begin(), by_three.begin() + 32), next);
  EXPECT_EQ(three.position(), (TokenLoader::Position{0, 113}));
  // Its epoch ends where fewer than 3 windows are left: 333 batches, 999 windows.
  three.restore({0, 996});
  starts(three, 1);
  EXPECT_EQ(three.position(), (TokenLoader::Position{1, 0}));
}

// Token ids against a vocabulary: the first id outside it, its shard and offset.
TEST_F(TokenLoaderTest, FindsTheFirstTokenOutsideTheVocabulary) {
  const std::string glob = make_shards({300, 700});  // ids 0..299, then 300..999
  TokenLoader loader(glob, 1, 4, 0, 1, 0, false);
  EXPECT_FALSE(loader.find_token_outside(1000).has_value());
  EXPECT_FALSE(loader.find_token_outside(50257).has_value());
  auto bad = loader.find_token_outside(256);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->shard.filename(), "x_train_000000.bin");
  EXPECT_EQ(bad->offset, 256);
  EXPECT_EQ(bad->id, 256);
  EXPECT_EQ(bad->max_id, 299);
  bad = loader.find_token_outside(500);  // in the second shard, 200 tokens in
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->shard.filename(), "x_train_000001.bin");
  EXPECT_EQ(bad->offset, 200);
  EXPECT_EQ(bad->id, 500);
  EXPECT_EQ(bad->max_id, 999);
  // One id at the end of a long shard (past any SIMD block), found by the same pass.
  std::vector<uint16_t> tokens(100003, 7);
  tokens.back() = 60000;
  write_token_shard(dir_ / "y_train_000000.bin", std::span<const uint16_t>(tokens));
  const MappedTokenShard shard(dir_ / "y_train_000000.bin");
  const auto last = find_token_outside_vocabulary(shard, 50257);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->offset, 100002);
  EXPECT_EQ(last->id, 60000);
  EXPECT_FALSE(find_token_outside_vocabulary(shard, 60001).has_value());
}

TEST_F(TokenLoaderTest, GlobWithNoMatchNamesThePattern) {
  const std::string pattern = (dir_ / "nothing_train_*.bin").string();
  try {
    TokenLoader loader(pattern, 1, 4, 0, 1, 0, true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(pattern), std::string::npos) << e.what();
  }
}

TEST_F(TokenLoaderTest, MissingPlainPathIsAnError) {
  EXPECT_THROW(TokenLoader((dir_ / "absent.bin").string(), 1, 4, 0, 1, 0, true), Error);
}

TEST_F(TokenLoaderTest, TooLittleDataForOneGlobalBatch) {
  const std::string glob = make_shards({33});  // 8 windows of T = 4
  EXPECT_NO_THROW(TokenLoader(glob, 4, 4, 0, 2, 0, true));
  try {
    TokenLoader loader(glob, 4, 4, 0, 4, 0, true);  // needs 16 windows
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one global batch"), std::string::npos) << e.what();
  }
}

TEST_F(TokenLoaderTest, RejectsBadArguments) {
  const std::string glob = make_shards({100});
  EXPECT_THROW(TokenLoader(glob, 0, 4, 0, 1, 0, true), Error);
  EXPECT_THROW(TokenLoader(glob, 1, 0, 0, 1, 0, true), Error);
  EXPECT_THROW(TokenLoader(glob, 1, 4, 2, 2, 0, true), Error);
  EXPECT_THROW(TokenLoader(glob, 1, 4, -1, 2, 0, true), Error);
}

TEST_F(TokenLoaderTest, CorruptShardFailsAtConstruction) {
  const std::string glob = make_shards({100, 100});
  std::filesystem::resize_file(dir_ / "x_train_000001.bin", 1024 + 51);
  try {
    TokenLoader loader(glob, 1, 4, 0, 1, 0, true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x_train_000001.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace aiscale::data
