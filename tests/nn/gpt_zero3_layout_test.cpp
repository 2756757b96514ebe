// The GPU ZeRO-3's shard geometry (nn/models/gpt_zero3_layout.h): every value of the working
// layout is owned by exactly one rank, the padded vocabulary rows by none in the flat
// layout, and a whole flat vector cut into every rank's shards and gathered unit by unit
// comes back unchanged; the optimizer offload's host AdamW (nn/models/gpt_zero3_host.h) on the
// shards equals the whole step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_zero3_host.h"
#include "aiscale/nn/models/gpt_zero3_layout.h"
#include "aiscale/ops/cpu/kernels.h"

using namespace aiscale;

namespace {

nn::GptConfig small_config() {
  nn::GptConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 24;
  c.block_size = 16;
  c.vocab_size = 50;  // padded to 128 rows in the working layout
  return c;
}

}  // namespace

TEST(Zero3Layout, UnitsCoverTheWorkingLayout) {
  const nn::GptLayout layout(small_config());
  const int64_t Vp = 128, shift = (Vp - 50) * 24;
  for (int world : {1, 2, 3, 4, 7}) {
    const nn::GptZero3Layout z(layout, Vp, world, 0);
    ASSERT_EQ(z.units(), 3 + 2);
    EXPECT_EQ(z.unit_begin(0), 0);
    EXPECT_EQ(z.unit_end(0), layout.embeddings_end() + shift);
    for (int64_t l = 0; l < 3; ++l) {
      EXPECT_EQ(z.unit_size(nn::GptZero3Layout::layer_unit(l)), layout.layer_size());
      EXPECT_EQ(z.unit_begin(nn::GptZero3Layout::layer_unit(l)), layout.layer_begin(l) + shift);
    }
    EXPECT_EQ(z.unit_size(z.lnf_unit()), 2 * 24);
    EXPECT_EQ(z.unit_end(z.lnf_unit()), layout.size() + shift);
    int64_t offset = 0;
    for (int u = 0; u < z.units(); ++u) {
      EXPECT_EQ(z.shard(u) % nn::GptZero3Layout::kAlign, 0);
      EXPECT_GE(z.padded(u), z.unit_size(u));
      EXPECT_EQ(z.shard_offset(u), offset);
      offset += z.shard(u);
    }
    EXPECT_EQ(z.shards_size(), offset);
  }
}

TEST(Zero3Layout, EveryValueHasOneOwner) {
  const nn::GptLayout layout(small_config());
  for (int world : {2, 3, 5}) {
    const nn::GptZero3Layout z0(layout, 128, world, 0);
    std::vector<int> owners(static_cast<size_t>(z0.unit_end(z0.lnf_unit())), 0);
    for (int r = 0; r < world; ++r) {
      const nn::GptZero3Layout z(layout, 128, world, r);
      for (int u = 0; u < z.units(); ++u)
        for (int64_t w = z.owned_begin(u); w < z.owned_end(u); ++w) ++owners[static_cast<size_t>(w)];
    }
    for (size_t w = 0; w < owners.size(); ++w) ASSERT_EQ(owners[w], 1) << "position " << w;
  }
}

TEST(Zero3Layout, RunsSkipThePaddedRows) {
  const nn::GptLayout layout(small_config());
  const nn::GptZero3Layout z(layout, 128, 1, 0);
  const auto runs = z.runs(0, z.unit_end(0));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].work, 0);
  EXPECT_EQ(runs[0].flat, 0);
  EXPECT_EQ(runs[0].n, 50 * 24);
  EXPECT_EQ(runs[1].work, 128 * 24);
  EXPECT_EQ(runs[1].flat, 50 * 24);
  EXPECT_EQ(runs[1].n, 16 * 24);
  // A range inside the padded rows holds no flat values.
  EXPECT_TRUE(z.runs(60 * 24, 100 * 24).empty());
}

TEST(Zero3Layout, ShardsGatherBackToTheFlatVector) {
  const nn::GptLayout layout(small_config());
  std::vector<float> flat(static_cast<size_t>(layout.size()));
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = 0.5f + static_cast<float>(i);
  for (int world : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> shards;
    for (int r = 0; r < world; ++r) {
      const nn::GptZero3Layout z(layout, 128, world, r);
      shards.emplace_back(static_cast<size_t>(z.shards_size()));
      z.flat_to_shards(flat.data(), shards.back().data());
    }
    const nn::GptZero3Layout z(layout, 128, world, 0);
    std::vector<float> back(flat.size(), -1.0f);
    for (int u = 0; u < z.units(); ++u) {
      // What an all-gather of unit u leaves: rank r's shard at r * shard(u).
      std::vector<float> gathered(static_cast<size_t>(z.padded(u)));
      for (int r = 0; r < world; ++r)
        std::copy(shards[r].begin() + z.shard_offset(u), shards[r].begin() + z.shard_offset(u) + z.shard(u),
                  gathered.begin() + r * z.shard(u));
      // The padded vocabulary rows of the embeddings' unit are zero.
      if (u == 0) {
        for (int64_t w = 50 * 24; w < 128 * 24; ++w) ASSERT_EQ(gathered[static_cast<size_t>(w)], 0.0f);
      }
      z.unit_to_flat(u, gathered.data(), back.data());
    }
    EXPECT_EQ(back, flat) << world << " ranks";
  }
}

// A streamed checkpoint's ranges: owned_runs finds each flat value of any range where
// flat_to_shards puts it on the rank that owns it, on exactly one rank, and nothing of the
// padded rows or of other ranges.
TEST(Zero3Layout, OwnedRunsOfARangeAreWhereTheShardsHoldIt) {
  const nn::GptLayout layout(small_config());
  const int64_t n = layout.size();
  std::vector<float> flat(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) flat[size_t(i)] = float(i + 1);
  for (int world : {1, 2, 3}) {
    std::vector<int> owners(static_cast<size_t>(n), 0);
    for (int rank = 0; rank < world; ++rank) {
      const nn::GptZero3Layout z(layout, 128, world, rank);
      std::vector<float> shards(static_cast<size_t>(z.shards_size()));
      z.flat_to_shards(flat.data(), shards.data());
      for (int64_t step : {int64_t{1}, int64_t{97}, int64_t{1000}, n}) {
        int64_t prev = -1;
        for (int64_t begin = 0; begin < n; begin += step) {
          const int64_t end = std::min(n, begin + step);
          z.owned_runs(begin, end, [&](int64_t f, int64_t index, int64_t count) {
            ASSERT_GE(f, begin);
            ASSERT_LE(f + count, end);
            ASSERT_GT(f, prev);  // in order, never twice
            prev = f + count - 1;
            for (int64_t i = 0; i < count; ++i) {
              ASSERT_EQ(shards[size_t(index + i)], flat[size_t(f + i)]) << "world " << world << " at " << f + i;
              if (step == n) ++owners[size_t(f + i)];
            }
          });
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(owners[size_t(i)], 1) << "world " << world << " value " << i;
  }
}

TEST(Zero3Layout, RejectsABadRank) {
  const nn::GptLayout layout(small_config());
  EXPECT_THROW(nn::GptZero3Layout(layout, 128, 2, 2), Error);
  EXPECT_THROW(nn::GptZero3Layout(layout, 10, 2, 0), Error);
}

// The host AdamW of the optimizer offload: each rank's step on its shards, assembled,
// equals AdamW over the whole flat vector with weight decay on the matrices only (the
// decay mask of the CPU model), and the working-copy shard is its bf16 rounding.
TEST(Zero3Layout, HostAdamWOnShardsEqualsTheWholeStep) {
  const nn::GptConfig c = small_config();
  const nn::GptLayout layout(c);
  const size_t P = static_cast<size_t>(layout.size());
  std::vector<float> p(P), g(P), m(P), v(P);
  for (size_t i = 0; i < P; ++i) {
    p[i] = 0.01f * static_cast<float>(int(i % 97) - 48);
    g[i] = 0.001f * static_cast<float>(int(i % 31) - 15);
    m[i] = 0.0005f * static_cast<float>(int(i % 13) - 6);
    v[i] = 1e-6f * static_cast<float>(i % 7 + 1);
  }
  ops::AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.step = 3;
  hp.grad_scale = 0.5f;
  // The whole step, tensor by tensor.
  std::vector<float> p_ref = p, m_ref = m, v_ref = v;
  ops::AdamWParams no_decay = hp;
  no_decay.weight_decay = 0.0f;
  for (const auto& t : layout.tensors()) {
    const size_t o = static_cast<size_t>(t.offset);
    ops::cpu::adamw_update(p_ref.data() + o, g.data() + o, m_ref.data() + o, v_ref.data() + o,
                           t.shape.numel(), nn::GptLayout::decays(t, true) ? hp : no_decay);
  }
  for (int world : {1, 3}) {
    std::vector<std::vector<float>> P_s, M_s, V_s;
    for (int r = 0; r < world; ++r) {
      const nn::GptZero3Layout z(layout, 128, world, r);
      const size_t S = static_cast<size_t>(z.shards_size());
      std::vector<float> ps(S), gs(S), ms(S), vs(S);
      z.flat_to_shards(p.data(), ps.data());
      z.flat_to_shards(g.data(), gs.data());
      z.flat_to_shards(m.data(), ms.data());
      z.flat_to_shards(v.data(), vs.data());
      std::vector<uint16_t> work(S);
      nn::zero3_host_adamw(z, layout, true, ps.data(), ms.data(), vs.data(), gs.data(), work.data(),
                              DType::bf16, hp);
      for (size_t i = 0; i < S; ++i) ASSERT_EQ(work[i], f32_to_bf16(ps[i])) << i;
      P_s.push_back(ps);
      M_s.push_back(ms);
      V_s.push_back(vs);
    }
    const nn::GptZero3Layout z(layout, 128, world, 0);
    auto assemble = [&](const std::vector<std::vector<float>>& shards) {
      std::vector<float> flat(P);
      for (int u = 0; u < z.units(); ++u) {
        std::vector<float> gathered(static_cast<size_t>(z.padded(u)));
        for (int r = 0; r < world; ++r)
          std::copy(shards[r].begin() + z.shard_offset(u), shards[r].begin() + z.shard_offset(u) + z.shard(u),
                    gathered.begin() + r * z.shard(u));
        z.unit_to_flat(u, gathered.data(), flat.data());
      }
      return flat;
    };
    // Element-wise arithmetic: equal up to the last bit (a slice's scalar tail may be
    // contracted into fused multiply-adds where the vector body is not).
    auto expect_close = [&](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
      for (size_t i = 0; i < P; ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6f * std::abs(want[i]) + 1e-12f) << what << " at " << i << ", " << world << " ranks";
    };
    expect_close(assemble(P_s), p_ref, "parameters");
    expect_close(assemble(M_s), m_ref, "m");
    expect_close(assemble(V_s), v_ref, "v");
  }
}
