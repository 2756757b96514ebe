// A shard set is replaced as a whole: a kill while `data tokenize` switches its new set in
// leaves a journal, and the next reader completes the switch, so it sees the new set only,
// never new shards mixed with old ones.
#include <gtest/gtest.h>

#include <fstream>

#include <fmt/format.h>

#include "aiscale/data/token_loader.h"
#include "aiscale/data/token_shard.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

void write_shard(const fs::path& p, int count, uint16_t value) {
  std::vector<uint16_t> t(static_cast<size_t>(count), value);
  data::write_token_shard(p, std::span<const uint16_t>(t));
}

TEST(ShardSwitch, InterruptedSwitchIsCompletedBeforeShardsAreListed) {
  fs::path dir = temp_dir("shard-switch");
  // The old set: three shards of token 1.
  for (int i = 0; i < 3; ++i)
    write_shard(dir / fmt::format("c_train_{:06d}.bin", i), 1000, 1);
  // The new set, written aside: two shards of token 2.
  std::vector<data::ShardRename> renames;
  for (int i = 0; i < 2; ++i) {
    data::TokenShardWriter w(dir / fmt::format("c_train_{:06d}.bin", i));
    std::vector<uint16_t> t(1500, 2);
    w.append(std::span<const uint16_t>(t));
    w.finish_aside();
    renames.push_back({w.temp_path(), w.path()});
  }
  // Killed after the journal and the first rename: on disk a mix of both sets.
  std::ofstream(dir / "c.shard-switch")
      << "R\t" << renames[0].from.string() << "\t" << renames[0].to.string() << "\n"
      << "R\t" << renames[1].from.string() << "\t" << renames[1].to.string() << "\n"
      << "D\t" << (dir / "c_train_000002.bin").string() << "\n";
  fs::rename(renames[0].from, renames[0].to);

  data::TokenLoader loader((dir / "c_train_*.bin").string(), 1, 8, 0, 1, 0, false);
  EXPECT_EQ(loader.shard_paths().size(), 2u);
  EXPECT_EQ(loader.total_tokens(), 3000);
  for (const auto& p : loader.shard_paths())
    for (uint16_t t : data::read_token_shard(p)) ASSERT_EQ(t, 2) << p;
  EXPECT_FALSE(fs::exists(dir / "c.shard-switch"));
  fs::remove_all(dir);
}

TEST(ShardSwitch, CommitReplacesTheSetAndRemovesStaleShards) {
  fs::path dir = temp_dir("shard-commit");
  for (int i = 0; i < 3; ++i) write_shard(dir / fmt::format("c_val_{:06d}.bin", i), 100, 1);
  data::TokenShardWriter w(dir / "c_val_000000.bin");
  std::vector<uint16_t> t(50, 3);
  w.append(std::span<const uint16_t>(t));
  w.finish_aside();
  EXPECT_EQ(data::read_token_shard(dir / "c_val_000000.bin")[0], 1);  // not switched in yet
  data::commit_shard_set(dir / "c.shard-switch", {{w.temp_path(), w.path()}},
                         {dir / "c_val_000001.bin", dir / "c_val_000002.bin"});
  EXPECT_EQ(data::read_token_shard(dir / "c_val_000000.bin"), t);
  EXPECT_FALSE(fs::exists(dir / "c_val_000001.bin"));
  EXPECT_FALSE(fs::exists(dir / "c.shard-switch"));
  fs::remove_all(dir);
}

}  // namespace
