#include "aiscale/nn/models/gpt_zero3_layout.h"

#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"

namespace aiscale::nn {

GptZero3Layout::GptZero3Layout(const nn::GptLayout& layout, int64_t vocab_padded, int world,
                               int rank)
    : GptZero3Layout(nn::GptShardLayout(layout.config(), 1, 0), vocab_padded, world, rank) {}

GptZero3Layout::GptZero3Layout(const nn::GptShardLayout& layout, int64_t vocab_padded, int world,
                               int rank)
    : world_(world), rank_(rank) {
  const nn::GptConfig& c = layout.config();
  if (world < 1 || rank < 0 || rank >= world)
    fail("ZeRO-3 layout: rank {} of {} ranks", rank, world);
  // The token embedding's rows this rank holds: the vocabulary, or its tensor rank's slice.
  const int64_t rows = layout.vocab_slice();
  if (vocab_padded < rows)
    fail("ZeRO-3 layout: {} padded vocabulary rows for {} token embedding rows", vocab_padded,
         rows);
  // The units are the whole model's (layer l is unit 1 + l).
  if (layout.first_layer() != 0 || layout.end_layer() != c.n_layer)
    fail("ZeRO-3 layout: a pipeline stage's layers");
  const int64_t shift = (vocab_padded - rows) * c.n_embd;
  vocab_rows_ = rows * c.n_embd;
  padded_rows_end_ = vocab_rows_ + shift;
  bounds_.push_back(0);
  for (int u = 0; u < layout.units(); ++u) bounds_.push_back(layout.unit_end(u) + shift);
  offset_.push_back(0);
  for (int u = 0; u < units(); ++u) {
    const int64_t per_rank = (unit_size(u) + world - 1) / world;
    shard_.push_back(std::max<int64_t>(kAlign, (per_rank + kAlign - 1) / kAlign * kAlign));
    offset_.push_back(offset_.back() + shard_.back());
  }
}

int64_t GptZero3Layout::owned_begin(int u) const {
  return std::min(unit_end(u), unit_begin(u) + rank_ * shard(u));
}
int64_t GptZero3Layout::owned_end(int u) const {
  return std::min(unit_end(u), unit_begin(u) + (rank_ + 1) * shard(u));
}

std::vector<GptZero3Layout::Run> GptZero3Layout::runs(int64_t begin, int64_t end) const {
  std::vector<Run> out;
  const int64_t shift = padded_rows_end_ - vocab_rows_;
  // Before the padded rows: flat == working; after them: flat == working - shift.
  if (begin < std::min(end, vocab_rows_)) out.push_back({begin, begin, std::min(end, vocab_rows_) - begin});
  const int64_t b = std::max(begin, padded_rows_end_);
  if (b < end) out.push_back({b, b - shift, end - b});
  return out;
}

std::vector<GptZero3Layout::Piece> GptZero3Layout::pieces(const nn::GptShardLayout& layout) const {
  std::vector<Piece> out;
  for (int u = 0; u < units(); ++u) {
    const int64_t ob = owned_begin(u);
    for (const Run& r : runs(ob, owned_end(u))) {
      const int64_t so = shard_offset(u) + (r.work - ob);
      layout.for_each_in(r.flat, r.flat + r.n, [&](int64_t b, int64_t e, const nn::ShardedTensor& x) {
        const bool rep = x.kind == nn::ShardKind::replicated;
        const int64_t at = so + (b - r.flat);
        if (e <= b) return;
        if (!out.empty() && out.back().replicated == rep && out.back().offset + out.back().n == at)
          out.back().n += e - b;
        else
          out.push_back(Piece{at, e - b, rep});
      });
    }
  }
  return out;
}

void GptZero3Layout::flat_to_shards(const float* flat, float* shards) const {
  std::fill(shards, shards + shards_size(), 0.0f);
  for (int u = 0; u < units(); ++u) {
    const int64_t ob = owned_begin(u);
    for (const Run& r : runs(ob, owned_end(u)))
      std::memcpy(shards + shard_offset(u) + (r.work - ob), flat + r.flat, size_t(r.n) * 4);
  }
}

void GptZero3Layout::unit_to_flat(int u, const float* gathered, float* flat) const {
  for (const Run& r : runs(unit_begin(u), unit_end(u)))
    std::memcpy(flat + r.flat, gathered + (r.work - unit_begin(u)), size_t(r.n) * 4);
}

void GptZero3Layout::owned_runs(int64_t begin, int64_t end,
                                const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  const int64_t shift = padded_rows_end_ - vocab_rows_;
  // The flat range in working positions: before the padded rows as it is, after them
  // shifted past them.
  const int64_t segments[2][2] = {{begin, std::min(end, vocab_rows_)},
                                  {std::max(begin, vocab_rows_), end}};
  for (int s = 0; s < 2; ++s) {
    const int64_t d = s == 0 ? 0 : shift;
    const int64_t lo = segments[s][0] + d, hi = segments[s][1] + d;
    if (lo >= hi) continue;
    // The first unit that ends after lo, then each unit the segment meets.
    int u = static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end(), lo) - bounds_.begin()) - 1;
    for (; u >= 0 && u < units() && unit_begin(u) < hi; ++u) {
      const int64_t ob = owned_begin(u);
      const int64_t a = std::max(lo, ob), b = std::min(hi, owned_end(u));
      if (a < b) fn(a - d, shard_offset(u) + (a - ob), b - a);
    }
  }
}

}  // namespace aiscale::nn
