// The one line `aiscale launch` prints when its ranks fail, and the records it reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "aiscale/core/exception_text.h"
#include "aiscale/launch/local.h"
#include "aiscale/parallel/rank_failure.h"

namespace aiscale::launch {
namespace {
namespace fs = std::filesystem;

RankFailureRecord rec(int rank, const std::string& message) {
  RankFailureRecord r;
  r.rank = rank;
  r.message = message;
  return r;
}

TEST(LaunchFailureSummary, NothingWhenTheJobSucceeded) {
  EXPECT_EQ(launch_failure_summary({}, 4, 0), "");
}

TEST(LaunchFailureSummary, OneRankFailedTheOthersEndedWithIt) {
  EXPECT_EQ(launch_failure_summary({rec(3, "cannot read shard x.bin")}, 4, 1),
            "launch: 1 of 4 rank(s) failed — rank 3: cannot read shard x.bin (the other 3 ended "
            "with them)");
}

TEST(LaunchFailureSummary, RanksWithTheSameMessageAreGroupedAndRangesShortened) {
  std::vector<RankFailureRecord> r = {rec(0, "A"), rec(1, "A"), rec(2, "A"), rec(5, "B"),
                                      rec(7, "A")};
  EXPECT_EQ(launch_failure_summary(r, 8, 1),
            "launch: 5 of 8 rank(s) failed — ranks 0-2, 7: A | rank 5: B (the other 3 ended "
            "with them)");
  EXPECT_EQ(launch_failure_summary({rec(0, "A"), rec(1, "A")}, 2, 1),
            "launch: 2 of 2 rank(s) failed — ranks 0, 1: A");
}

TEST(LaunchFailureSummary, AFailureWithoutRecordsSaysSo) {
  const std::string s = launch_failure_summary({}, 2, 137);
  EXPECT_NE(s.find("mpirun ended with status 137 and no rank reported an error"), std::string::npos)
      << s;
}

TEST(LaunchFailureSummary, RecordsWrittenByRanksAreReadBackInRankOrder) {
  const fs::path dir = fs::temp_directory_path() / ("aiscale-failure-records-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::setenv("AISCALE_FAILURE_DIR", dir.c_str(), 1);
  parallel::record_failure(2, ExceptionText{"second", 1}, "", true);
  parallel::record_failure(0, ExceptionText{"first", 1}, "", false);
  ::unsetenv("AISCALE_FAILURE_DIR");
  std::ofstream(dir / "rank-9.json") << "{\"rank\": 9, \"mess";  // cut short: skipped
  const auto records = read_failure_records(dir.string());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].rank, 0);
  EXPECT_EQ(records[0].message, "first");
  EXPECT_EQ(records[1].rank, 2);
  EXPECT_EQ(records[1].message, "second");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aiscale::launch
