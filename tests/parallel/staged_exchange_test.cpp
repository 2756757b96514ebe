// The host side of GPU collectives staged through host memory (parallel/staged_exchange.h):
// bf16 and fp16 values summed in fp32 and rounded once, and a group's point-to-point
// operations ordered so that blocking sends and receives never wait for each other in a
// cycle (checked by playing the ranks' operations against each other).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/parallel/staged_exchange.h"

using namespace aiscale;
using namespace aiscale::parallel::staging;

namespace {

// Each rank's operations (as queued) run in the given order with rendezvous semantics: a
// send completes only together with the receive its peer has reached. Returns whether
// every rank got through, and in `delivered` the order in which each (from, to) pair's
// messages matched (message ids: the sender's index of the op).
struct Played {
  bool complete = false;
  std::vector<std::vector<std::vector<size_t>>> delivered;  // [from][to] -> sender op indices
};
Played play(const std::vector<std::vector<PeerOp>>& ops,
            const std::vector<std::vector<size_t>>& orders) {
  const size_t world = ops.size();
  std::vector<size_t> at(world, 0);
  Played p;
  p.delivered.assign(world, std::vector<std::vector<size_t>>(world));
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t r = 0; r < world; ++r) {
      if (at[r] == orders[r].size()) continue;
      const size_t i = orders[r][at[r]];
      const PeerOp& op = ops[r][i];
      if (!op.send) continue;
      const size_t q = static_cast<size_t>(op.peer);
      if (at[q] == orders[q].size()) continue;
      const PeerOp& other = ops[q][orders[q][at[q]]];
      if (other.send || other.peer != static_cast<int>(r)) continue;
      p.delivered[r][q].push_back(i);
      ++at[r];
      ++at[q];
      moved = true;
    }
  }
  p.complete = true;
  for (size_t r = 0; r < world; ++r) p.complete = p.complete && at[r] == orders[r].size();
  return p;
}

std::vector<std::vector<size_t>> staged_orders(const std::vector<std::vector<PeerOp>>& ops) {
  std::vector<std::vector<size_t>> orders;
  for (size_t r = 0; r < ops.size(); ++r) orders.push_back(point_to_point_order(int(r), ops[r]));
  return orders;
}

std::vector<std::vector<size_t>> queued_orders(const std::vector<std::vector<PeerOp>>& ops) {
  std::vector<std::vector<size_t>> orders;
  for (const auto& o : ops) {
    orders.emplace_back();
    for (size_t i = 0; i < o.size(); ++i) orders.back().push_back(i);
  }
  return orders;
}

// Every rank sends to the next and receives from the previous, as the ring all-reduce's
// steps and a pipeline's neighbours do.
std::vector<std::vector<PeerOp>> ring(int world) {
  std::vector<std::vector<PeerOp>> ops(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    ops[size_t(r)].push_back({true, (r + 1) % world});
    ops[size_t(r)].push_back({false, (r - 1 + world) % world});
  }
  return ops;
}

}  // namespace

TEST(StagedExchange, Bf16SumsInFp32AndRoundsOnce) {
  // 1 + 2^-8 + 2^-8: each addend alone rounds away in bf16 (8 bits of mantissa), their sum
  // in fp32 does not.
  const float a = 1.0f, b = std::ldexp(1.0f, -8);
  std::vector<uint16_t> x = {f32_to_bf16(a), f32_to_bf16(b)};
  std::vector<float> wide(2);
  widen(DType::bf16, x.data(), wide.data(), 2);
  EXPECT_EQ(wide[0], a);
  EXPECT_EQ(wide[1], b);
  const float sum = wide[0] + wide[1] + b;
  uint16_t out = 0;
  narrow(DType::bf16, &sum, &out, 1);
  EXPECT_EQ(bf16_to_f32(out), 1.0f + std::ldexp(1.0f, -7));
  // Ties to even, and NaN stays NaN.
  const float tie = 1.0f + std::ldexp(1.0f, -8);
  narrow(DType::bf16, &tie, &out, 1);
  EXPECT_EQ(bf16_to_f32(out), 1.0f);
  const float nan = std::nanf("");
  narrow(DType::bf16, &nan, &out, 1);
  EXPECT_TRUE(std::isnan(bf16_to_f32(out)));
}

TEST(StagedExchange, Fp16AndFp32RoundTrip) {
  const std::vector<float> v = {0.5f, -3.25f, 65504.0f, -0.0f};
  std::vector<uint16_t> h(v.size());
  narrow(DType::f16, v.data(), h.data(), int64_t(v.size()));
  std::vector<float> back(v.size());
  widen(DType::f16, h.data(), back.data(), int64_t(v.size()));
  EXPECT_EQ(back, v);
  EXPECT_TRUE(std::signbit(back[3]));
  std::vector<float> same(v.size());
  widen(DType::f32, v.data(), same.data(), int64_t(v.size()));
  EXPECT_EQ(same, v);
  narrow(DType::f32, v.data(), same.data(), int64_t(v.size()));
  EXPECT_TRUE(std::signbit(same[3]));
}

// The ring: in queued order (send, then receive) every rank waits for its successor's
// receive while the successor waits in its own send: no rank moves. The staged order
// completes, for every world size.
TEST(StagedExchange, RingCompletesWhereTheQueuedOrderWaitsInACycle) {
  for (int world = 2; world <= 7; ++world) {
    const auto ops = ring(world);
    EXPECT_FALSE(play(ops, queued_orders(ops)).complete) << world << " ranks";
    EXPECT_TRUE(play(ops, staged_orders(ops)).complete) << world << " ranks";
  }
}

// Pipeline stages exchanging with both neighbours, several messages each way, and every
// pair of ranks exchanging: complete, and the messages between two ranks match in the
// order queued.
TEST(StagedExchange, NeighboursAndAllPairsKeepTheirMessageOrder) {
  const int world = 5;
  std::vector<std::vector<PeerOp>> stages(world), all(world);
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < 3; ++k) {
      if (r + 1 < world) stages[size_t(r)].push_back({true, r + 1});
      if (r > 0) stages[size_t(r)].push_back({true, r - 1});
      if (r + 1 < world) stages[size_t(r)].push_back({false, r + 1});
      if (r > 0) stages[size_t(r)].push_back({false, r - 1});
    }
    for (int q = world - 1; q >= 0; --q)
      if (q != r) {
        all[size_t(r)].push_back({false, q});
        all[size_t(r)].push_back({true, q});
      }
  }
  for (const auto* ops : {&stages, &all}) {
    const Played p = play(*ops, staged_orders(*ops));
    ASSERT_TRUE(p.complete);
    for (size_t from = 0; from < size_t(world); ++from)
      for (size_t to = 0; to < size_t(world); ++to) {
        std::vector<size_t> queued;
        for (size_t i = 0; i < (*ops)[from].size(); ++i)
          if ((*ops)[from][i].send && (*ops)[from][i].peer == int(to)) queued.push_back(i);
        EXPECT_EQ(p.delivered[from][to], queued) << from << " -> " << to;
      }
  }
}

TEST(StagedExchange, LowerRankSendsFirst) {
  const std::vector<PeerOp> ops = {{false, 1}, {true, 1}};
  EXPECT_EQ(point_to_point_order(0, ops), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(point_to_point_order(2, ops), (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(point_to_point_order(0, {}).empty());
}
