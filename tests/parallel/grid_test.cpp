// The process grid's layout, checked against tables written out by hand.
#include <gtest/gtest.h>

#include <set>

#include "aiscale/parallel/grid.h"
#include "../support/error_of.h"

using namespace aiscale::parallel;
using aiscale::testsupport::error_of;

namespace {

using Groups = std::vector<std::vector<int>>;

ProcessGrid grid(int world, int dp, int tp, int pp, const std::string& order = "tp-cp-dp-pp") {
  GridOptions o;
  o.world = world;
  o.dp = dp;
  o.tp = tp;
  o.pp = pp;
  o.order = order;
  return ProcessGrid(o);
}

}  // namespace

// 8 ranks, dp 2 x tp 2 x pp 2, tp fastest: rank = tp + 2 dp + 4 pp.
TEST(ProcessGrid, EightRanksByHand) {
  const ProcessGrid g = grid(8, 2, 2, 2);
  EXPECT_EQ(g.describe(), "world 8 = dp 2 x tp 2 x pp 2 (order tp-cp-dp-pp)");
  EXPECT_EQ(g.groups(Axis::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(Axis::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(Axis::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups(Axis::cp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(g.embedding_groups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  //            rank:  0  1  2  3  4  5  6  7
  const int dp[] = {0, 0, 1, 1, 0, 0, 1, 1};
  const int tp[] = {0, 1, 0, 1, 0, 1, 0, 1};
  const int pp[] = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    const GridCoord c = g.coord(r);
    EXPECT_EQ(c.dp, dp[r]) << r;
    EXPECT_EQ(c.tp, tp[r]) << r;
    EXPECT_EQ(c.pp, pp[r]) << r;
    EXPECT_EQ(c.cp, 0) << r;
    EXPECT_EQ(g.rank_of(c), r);
  }
  EXPECT_EQ(g.group(Axis::dp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.group_index(Axis::dp, 5), 3);  // {5, 7} is the fourth data group
  EXPECT_EQ(g.group_index(Axis::tp, 6), 3);
  EXPECT_EQ(g.group_index(Axis::pp, 3), 3);
}

// 16 ranks, tp 2 x pp 4 x dp 2 (the example of Megatron-LM's documentation):
// tensor [0,1] [2,3] ..., pipeline [0,4,8,12] [1,5,9,13] ..., data [0,2] [1,3] [4,6] ...
TEST(ProcessGrid, SixteenRanksByHand) {
  const ProcessGrid g = grid(16, 0, 2, 4);  // dp derived: 16 / (2 x 4) = 2
  EXPECT_EQ(g.size(Axis::dp), 2);
  EXPECT_EQ(g.groups(Axis::tp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups(Axis::pp), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.groups(Axis::dp),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.embedding_groups(), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(g.embedding_group(13), (std::vector<int>{1, 13}));
  EXPECT_TRUE(g.embedding_group(5).empty());  // a middle stage
  EXPECT_TRUE(g.embedding_group(9).empty());
  EXPECT_EQ(g.coord(11), (GridCoord{1, 1, 2, 0}));  // 11 = 1 + 2*1 + 4*2
}

// Another order: data fastest (dp-tp-pp-cp), 8 ranks dp 2 x tp 2 x pp 2: rank = dp + 2 tp + 4 pp.
TEST(ProcessGrid, OrderChoosesTheFastestAxis) {
  const ProcessGrid g = grid(8, 2, 2, 2, "dp-tp-pp-cp");
  EXPECT_EQ(g.groups(Axis::dp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(Axis::tp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(Axis::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Every rank is in exactly one group per axis; a group's members differ only along it.
TEST(ProcessGrid, GroupsPartitionTheRanks) {
  GridOptions o;
  o.world = 24;
  o.tp = 2;
  o.pp = 3;
  o.cp = 2;
  const ProcessGrid g(o);
  EXPECT_EQ(g.size(Axis::dp), 2);
  for (Axis a : {Axis::dp, Axis::tp, Axis::pp, Axis::cp}) {
    std::set<int> seen;
    const Groups groups = g.groups(a);
    ASSERT_EQ(groups.size(), size_t(24 / g.size(a)));
    for (size_t i = 0; i < groups.size(); ++i)
      for (size_t k = 0; k < groups[i].size(); ++k) {
        const int r = groups[i][k];
        EXPECT_TRUE(seen.insert(r).second) << axis_name(a) << " rank " << r;
        EXPECT_EQ(g.coord(r)[a], int(k));
        EXPECT_EQ(g.group_index(a, r), int(i));
        GridCoord c = g.coord(r), first = g.coord(groups[i][0]);
        c[a] = first[a] = 0;
        EXPECT_EQ(c, first);
      }
    EXPECT_EQ(seen.size(), 24u);
  }
}

TEST(ProcessGrid, OneRankIsItsOwnEverything) {
  const ProcessGrid g = grid(1, 0, 1, 1);
  EXPECT_EQ(g.groups(Axis::dp), (Groups{{0}}));
  EXPECT_EQ(g.embedding_group(0), (std::vector<int>{0}));
}

TEST(ProcessGrid, ErrorsNameTheNumbersAndTheFix) {
  std::string e = error_of([] { grid(10, 0, 4, 1); });
  EXPECT_NE(e.find("10 ranks cannot be divided into groups of tp 4 x pp 1 x cp 1 = 4"), std::string::npos) << e;
  EXPECT_NE(e.find("launch a multiple of 4"), std::string::npos) << e;
  e = error_of([] { grid(8, 4, 2, 2); });
  EXPECT_NE(e.find("dp 4 x tp 2 x pp 2 x cp 1 = 16 ranks, but the job has 8"), std::string::npos) << e;
  e = error_of([] { grid(8, 0, 0, 1); });
  EXPECT_NE(e.find("tp = 0 must be at least 1"), std::string::npos) << e;
  e = error_of([] { grid(8, 0, 2, 2, "tp-dp-pp"); });
  EXPECT_NE(e.find("leaves out cp"), std::string::npos) << e;
  e = error_of([] { grid(8, 0, 2, 2, "tp-tp-dp-pp"); });
  EXPECT_NE(e.find("names tp twice"), std::string::npos) << e;
  e = error_of([] { grid(8, 0, 2, 2, "tp-ep-dp-pp"); });
  EXPECT_NE(e.find("'ep' is not an axis"), std::string::npos) << e;
  const ProcessGrid g = grid(8, 2, 2, 2);
  e = error_of([&] { g.coord(8); });
  EXPECT_NE(e.find("rank 8 is outside 0..7"), std::string::npos) << e;
}

TEST(ProcessGrid, TensorGroupsStayInsideANode) {
  GridOptions o;
  o.world = 16;
  o.tp = 8;
  o.ranks_per_node = 4;
  std::string e = error_of([&] { ProcessGrid g(o); });
  EXPECT_NE(e.find("tp = 8 is larger than the 4 GPUs (ranks) per node"), std::string::npos) << e;
  EXPECT_NE(e.find("use tp <= 4"), std::string::npos) << e;
  o.tp = 2;
  o.order = "dp-tp-pp-cp";  // tp not fastest: tensor pairs {0, 8}, ... cross nodes
  e = error_of([&] { ProcessGrid g(o); });
  EXPECT_NE(e.find("spans several nodes of 4 ranks"), std::string::npos) << e;
  o.tp = 3;  // does not divide the node
  o.world = 12;
  o.order = "tp-cp-dp-pp";
  e = error_of([&] { ProcessGrid g(o); });
  EXPECT_NE(e.find("tensor group of ranks 3..5"), std::string::npos) << e;
  o.tp = 4;
  o.world = 16;
  EXPECT_EQ(ProcessGrid(o).groups(Axis::tp).size(), 4u);
}
