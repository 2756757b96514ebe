// The ring and hierarchical all-reduce over in-process ranks (threads): exact sums of
// integer-valued floats, float sums within rounding, the same bits on every rank, for
// odd sizes and rank counts; the node topology.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "aiscale/core/error.h"
#include "aiscale/parallel/algorithms/allreduce_choice.h"
#include "aiscale/parallel/algorithms/hierarchical.h"
#include "aiscale/parallel/algorithms/ring.h"
#include "in_process_ranks.h"

using namespace aiscale;
using namespace aiscale::parallel::algorithms;
using aiscale::testsupport::Fabric;
using aiscale::testsupport::run_ranks;
using aiscale::testsupport::ThreadLinks;

namespace {

// Rank r's values: integers (exact in any order of summation) or random floats.
std::vector<float> values(int rank, int64_t n, bool integers) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 gen(static_cast<uint32_t>(1000 + rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = integers ? static_cast<float>((i * 7 + rank * 13) % 1001 - 500) : u(gen);
  return v;
}

// Every rank's result of `algorithm` (ring, or hierarchical with ranks_per_node).
std::vector<std::vector<float>> run_algorithm(const std::string& algorithm, int world, int64_t n,
                                              bool integers, int64_t chunk, int ranks_per_node = 1) {
  Fabric fabric;
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  std::vector<int64_t> keys;
  for (int r = 0; r < world; ++r) keys.push_back(forced_node_key(r, ranks_per_node));
  const NodeTopology topology = topology_from_node_keys(keys);
  run_ranks(world, [&](int r) {
    ThreadLinks links(fabric, r, world);
    std::vector<float> v = values(r, n, integers);
    if (algorithm == "ring") ring_allreduce_sum(links, v.data(), n, chunk);
    else hierarchical_allreduce_sum(links, topology, v.data(), n, chunk);
    out[static_cast<size_t>(r)] = std::move(v);
  });
  return out;
}

void expect_sums(const std::vector<std::vector<float>>& got, int64_t n, bool integers,
                 const std::string& what) {
  const int world = static_cast<int>(got.size());
  std::vector<double> exact(static_cast<size_t>(n), 0.0), magnitude(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> v = values(r, n, integers);
    for (int64_t i = 0; i < n; ++i) {
      exact[static_cast<size_t>(i)] += v[static_cast<size_t>(i)];
      magnitude[static_cast<size_t>(i)] += std::abs(v[static_cast<size_t>(i)]);
    }
  }
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[0][static_cast<size_t>(i)], e = exact[static_cast<size_t>(i)];
    const bool ok = integers ? g == e : std::abs(g - e) <= 1e-6 * magnitude[static_cast<size_t>(i)] + 1e-7;
    if (!ok && wrong++ < 3) ADD_FAILURE() << what << ": value " << i << " is " << g << ", the sum is " << e;
  }
  EXPECT_EQ(wrong, 0) << what;
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(std::memcmp(got[0].data(), got[static_cast<size_t>(r)].data(), static_cast<size_t>(n) * 4), 0)
        << what << ": rank " << r << " ends with other bits than rank 0";
}

}  // namespace

TEST(RingAllreduce, ExactOnIntegersAnySizeAndRankCount) {
  for (int world : {1, 2, 3, 4, 5})
    for (int64_t n : {1, 2, 3, 7, 64, 1001})
      for (int64_t chunk : {int64_t{1}, int64_t{3}, kDefaultChunkFloats}) {
        const std::string what = "ring, " + std::to_string(world) + " ranks, n " + std::to_string(n) +
                                 ", chunk " + std::to_string(chunk);
        expect_sums(run_algorithm("ring", world, n, true, chunk), n, true, what);
      }
}

TEST(RingAllreduce, FloatsWithinRoundingOnALargeOddBuffer) {
  const int64_t n = 1000003;
  for (int world : {2, 3, 4}) {
    expect_sums(run_algorithm("ring", world, n, false, 4096), n, false, "ring floats " + std::to_string(world));
    expect_sums(run_algorithm("ring", world, n, true, kDefaultChunkFloats), n, true, "ring integers " + std::to_string(world));
  }
}

TEST(HierarchicalAllreduce, ExactOnIntegersForEvenAndUnevenNodes) {
  // {ranks, ranks_per_node}: two nodes of two, an uneven 2 + 1, one node, all leaders,
  // three nodes of 2, 2 and 1.
  for (auto [world, per_node] : {std::pair{4, 2}, {3, 2}, {4, 4}, {4, 1}, {5, 2}, {2, 2}, {2, 1}})
    for (int64_t n : {1, 7, 1000})
      for (int64_t chunk : {int64_t{2}, kDefaultChunkFloats}) {
        const std::string what = "hierarchical, " + std::to_string(world) + " ranks, " +
                                 std::to_string(per_node) + " per node, n " + std::to_string(n) +
                                 ", chunk " + std::to_string(chunk);
        expect_sums(run_algorithm("hierarchical", world, n, true, chunk, per_node), n, true, what);
      }
}

TEST(HierarchicalAllreduce, FloatsWithinRoundingOnALargeOddBuffer) {
  const int64_t n = 1000003;
  expect_sums(run_algorithm("hierarchical", 4, n, false, 8192, 2), n, false, "hierarchical 4 / 2");
  expect_sums(run_algorithm("hierarchical", 3, n, true, kDefaultChunkFloats, 2), n, true, "hierarchical 3 / 2");
}

TEST(NodeTopology, GroupsRanksByKeyLeadersFirst) {
  const NodeTopology t = topology_from_node_keys({7, 7, 3, 7, 3});
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[0], (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(t.nodes[1], (std::vector<int>{2, 4}));
  EXPECT_EQ(t.leaders(), (std::vector<int>{0, 2}));
  EXPECT_EQ(t.node_of, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(forced_node_key(5, 2), 2);
}

TEST(AllreduceChoice, ParsesTheThreeAndRefusesOthers) {
  EXPECT_EQ(parse_allreduce_algorithm("ring"), AllreduceAlgorithm::ring);
  EXPECT_EQ(parse_allreduce_algorithm("hierarchical"), AllreduceAlgorithm::hierarchical);
  EXPECT_STREQ(allreduce_algorithm_name(AllreduceAlgorithm::library), "library");
  try {
    parse_allreduce_algorithm("tree");
    FAIL() << "tree accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("library, ring or hierarchical"), std::string::npos) << e.what();
  }
}
