// The GPU ZeRO-2/3 geometry over a tensor rank's local buffer (dp x tp, nn/models/gpt_zero3_layout.h
// with nn::GptShardLayout): with one tensor rank it is the whole model's geometry exactly;
// with several, its units are the local buffer's (each layer's slice), every tensor rank's
// data group cuts its buffer alike (so the replicated tensors, equal over the tensor ranks,
// land in the same shard positions), and a local vector cut into shards and gathered unit
// by unit comes back unchanged.
#include <gtest/gtest.h>

#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/nn/models/gpt_zero3_layout.h"

using namespace aiscale;

namespace {

nn::GptConfig small_config() {
  nn::GptConfig c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 50;  // padded to 128 rows in the working layout
  return c;
}

// Tensor slices with the vocabulary whole on every tensor rank (AISCALE_CUDA_VOCAB_PARALLEL=0).
nn::GptShardLayout slices(int tp, int rank) {
  return nn::GptShardLayout(small_config(), tp, rank, /*vocab_parallel=*/false);
}

}  // namespace

TEST(Zero3TensorLayout, OneTensorRankIsTheWholeModel) {
  const nn::GptLayout whole(small_config());
  for (int world : {1, 2, 3, 4}) {
    for (int r = 0; r < world; ++r) {
      const nn::GptZero3Layout a(whole, 128, world, r), b(slices(1, 0), 128, world, r);
      ASSERT_EQ(a.units(), b.units());
      for (int u = 0; u < a.units(); ++u) {
        EXPECT_EQ(a.unit_begin(u), b.unit_begin(u));
        EXPECT_EQ(a.unit_end(u), b.unit_end(u));
        EXPECT_EQ(a.shard(u), b.shard(u));
        EXPECT_EQ(a.shard_offset(u), b.shard_offset(u));
        EXPECT_EQ(a.owned_begin(u), b.owned_begin(u));
        EXPECT_EQ(a.owned_end(u), b.owned_end(u));
      }
      EXPECT_EQ(a.shards_size(), b.shards_size());
    }
  }
}

TEST(Zero3TensorLayout, UnitsAreTheLocalBuffersAndAlikeOnEveryTensorRank) {
  const int64_t shift = (128 - 50) * 32;
  for (int tp : {2, 4}) {
    for (int world : {1, 2, 3}) {
      const nn::GptShardLayout s0 = slices(tp, 0);
      const nn::GptZero3Layout z0(s0, 128, world, world - 1);
      ASSERT_EQ(z0.units(), s0.units());
      for (int u = 0; u < s0.units(); ++u) {
        EXPECT_EQ(z0.unit_begin(u), s0.unit_begin(u) + (u > 0 ? shift : 0));
        EXPECT_EQ(z0.unit_end(u), s0.unit_end(u) + shift);
      }
      EXPECT_EQ(z0.unit_size(nn::GptZero3Layout::layer_unit(0)), s0.layer_size());
      EXPECT_LT(s0.layer_size(), nn::GptLayout(small_config()).layer_size());
      for (int t = 1; t < tp; ++t) {
        const nn::GptZero3Layout z(slices(tp, t), 128, world, world - 1);
        ASSERT_EQ(z.units(), z0.units());
        for (int u = 0; u < z.units(); ++u) {
          EXPECT_EQ(z.unit_begin(u), z0.unit_begin(u));
          EXPECT_EQ(z.shard(u), z0.shard(u));
          EXPECT_EQ(z.shard_offset(u), z0.shard_offset(u));
          EXPECT_EQ(z.owned_begin(u), z0.owned_begin(u));
        }
        // The replicated tensors at the same local offsets: the same shard positions.
        const nn::GptShardLayout st = slices(tp, t);
        const auto& a = s0.tensors();
        const auto& b = st.tensors();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i)
          if (a[i].kind == nn::ShardKind::replicated) {
            EXPECT_EQ(b[i].offset, a[i].offset) << a[i].full.name;
            EXPECT_EQ(b[i].numel, a[i].numel) << a[i].full.name;
          }
      }
    }
  }
}

// Also with the vocabulary split (the CUDA model's default): a rank's slice, padding rows
// included, is already its working copy's rows, so no rows are inserted after it.
TEST(Zero3TensorLayout, ShardsGatherBackToTheLocalVector) {
  for (bool split : {false, true}) {
  for (int tp : {2, 4}) {
    const nn::GptShardLayout s =
        split ? nn::GptShardLayout(small_config(), tp, 1, true, 0, -1, 8) : slices(tp, 1);
    const int64_t rows = split ? s.vocab_slice() : 128;
    std::vector<float> local(static_cast<size_t>(s.size()));
    for (size_t i = 0; i < local.size(); ++i) local[i] = 0.25f + static_cast<float>(i);
    for (int world : {1, 2, 3}) {
      std::vector<std::vector<float>> shards;
      for (int r = 0; r < world; ++r) {
        const nn::GptZero3Layout z(s, rows, world, r);
        shards.emplace_back(static_cast<size_t>(z.shards_size()));
        z.flat_to_shards(local.data(), shards.back().data());
      }
      const nn::GptZero3Layout z(s, rows, world, 0);
      if (split) {
        EXPECT_EQ(z.unit_end(z.units() - 1), s.size());
      }
      std::vector<float> back(local.size(), -1.0f);
      for (int u = 0; u < z.units(); ++u) {
        std::vector<float> gathered(static_cast<size_t>(z.padded(u)));
        for (int r = 0; r < world; ++r)
          std::copy(shards[r].begin() + z.shard_offset(u),
                    shards[r].begin() + z.shard_offset(u) + z.shard(u),
                    gathered.begin() + r * z.shard(u));
        z.unit_to_flat(u, gathered.data(), back.data());
      }
      EXPECT_EQ(back, local) << "tp " << tp << ", " << world << " data ranks, split " << split;
    }
  }
  }
}

// The pieces the gradient norm sums apart: over the data ranks they cover every value of the
// local buffer once, split and replicated as its tensors are, and nothing else.
TEST(Zero3TensorLayout, PiecesCoverTheLocalBufferByKind) {
  for (int tp : {1, 2, 4}) {
    const nn::GptShardLayout s = slices(tp, tp - 1);
    int64_t split = 0, replicated = 0;
    for (const auto& t : s.tensors()) (t.kind == nn::ShardKind::replicated ? replicated : split) += t.numel;
    for (int world : {1, 2, 3}) {
      int64_t seen_split = 0, seen_replicated = 0;
      for (int r = 0; r < world; ++r) {
        const nn::GptZero3Layout z(s, 128, world, r);
        // Mark each local value a piece holds through the shards of a local vector of its
        // own positions.
        std::vector<float> local(static_cast<size_t>(s.size()));
        for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<float>(i) + 1.0f;
        std::vector<float> shards(static_cast<size_t>(z.shards_size()));
        z.flat_to_shards(local.data(), shards.data());
        int64_t end = 0;
        for (const auto& p : z.pieces(s)) {
          ASSERT_GE(p.offset, end);  // in order, no overlap
          end = p.offset + p.n;
          ASSERT_LE(end, z.shards_size());
          for (int64_t i = p.offset; i < end; ++i) {
            const float v = shards[static_cast<size_t>(i)];
            ASSERT_GT(v, 0.0f) << "padding in a piece";
            const int64_t at = static_cast<int64_t>(v) - 1;
            bool rep = false;
            for (const auto& t : s.tensors())
              if (at >= t.offset && at < t.offset + t.numel) rep = t.kind == nn::ShardKind::replicated;
            ASSERT_EQ(rep, p.replicated) << "local value " << at;
          }
          (p.replicated ? seen_replicated : seen_split) += p.n;
        }
      }
      EXPECT_EQ(seen_split, split) << "tp " << tp << ", " << world << " data ranks";
      EXPECT_EQ(seen_replicated, replicated) << "tp " << tp << ", " << world << " data ranks";
    }
  }
}

// The padded vocabulary rows follow whole wte rows: a vocabulary split over the tensor
// ranks, or a pipeline stage's layers, is refused.
TEST(Zero3TensorLayout, RefusesAStageOrTooFewWorkingRows) {
  EXPECT_THROW(nn::GptZero3Layout(nn::GptShardLayout(small_config(), 1, 0, false, 1, 3), 128, 2, 0),
               Error);
  const nn::GptShardLayout split(small_config(), 2, 1, true, 0, -1, 8);
  EXPECT_THROW(nn::GptZero3Layout(split, split.vocab_slice() - 1, 2, 0), Error);
}
