#include "aiscale/nn/models/gpt_shard.h"

#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"

namespace aiscale::nn {
namespace {

// How each block tensor is split (in GptBlockParam order).
struct Split {
  ShardKind kind;
  int parts;
};
constexpr Split kBlockSplit[kGptBlockParams] = {
    {ShardKind::replicated, 1}, {ShardKind::replicated, 1},  // ln_1
    {ShardKind::rows, 3},       {ShardKind::rows, 3},        // QKV: whole heads of Q, K, V
    {ShardKind::columns, 1},    {ShardKind::replicated, 1},  // attention projection
    {ShardKind::replicated, 1}, {ShardKind::replicated, 1},  // ln_2
    {ShardKind::rows, 1},       {ShardKind::rows, 1},        // MLP up (llama: gate and up)
    {ShardKind::columns, 1},    {ShardKind::replicated, 1},  // MLP down
};

}  // namespace

int64_t vocab_slice_rows(int64_t vocab, int tp, int64_t align) {
  const int64_t rows = (vocab + tp - 1) / tp;
  return (rows + align - 1) / align * align;
}

int64_t gpu_vocab_align(int64_t vocab, int tp) { return (vocab + tp - 1) / tp >= 4096 ? 128 : 8; }

GptShardLayout::GptShardLayout(const GptConfig& c, int tp, int rank, bool vocab_parallel,
                               int64_t first_layer, int64_t end_layer, int64_t vocab_align)
    : config_(c), tp_(tp), rank_(rank), vocab_parallel_(vocab_parallel && tp > 1),
      first_(first_layer), end_(end_layer < 0 ? c.n_layer : end_layer) {
  AISCALE_CHECK(tp >= 1 && rank >= 0 && rank < tp && c.n_head % tp == 0 &&
                    c.n_embd % tp == 0 && c.kv_heads() % tp == 0 && c.ffn() % tp == 0 &&
                    vocab_align >= 1,
                "tensor-parallel layout {} of {} does not fit the model", rank, tp);
  vocab_slice_ = vocab_parallel_ ? vocab_slice_rows(c.vocab_size, tp, vocab_align) : c.vocab_size;
  vocab_begin_ = vocab_parallel_ ? rank * vocab_slice_ : 0;
  vocab_rows_ = std::clamp<int64_t>(c.vocab_size - vocab_begin_, 0, vocab_slice_);
  AISCALE_CHECK(first_ >= 0 && first_ <= end_ && end_ <= c.n_layer,
                "pipeline stage layers [{}, {}) do not fit {} layers", first_, end_, c.n_layer);
  const GptLayout full(c);
  int64_t offset = 0;
  for (const GptParamInfo& p : full.tensors()) {
    if (p.layer >= 0 && (p.layer < first_ || p.layer >= end_)) continue;  // another stage's
    ShardedTensor t;
    t.full = p;
    if (vocab_tensor(p)) {
      if (vocab_parallel) t.kind = ShardKind::rows;
    } else if (p.layer >= 0) {
      for (int j = 0; j < kGptBlockParams; ++j)
        if (full.numel(static_cast<GptBlockParam>(j)) > 0 &&
            p.offset == full.at(p.layer, static_cast<GptBlockParam>(j))) {
          const auto param = static_cast<GptBlockParam>(j);
          t.kind = kBlockSplit[j].kind;
          t.parts = kBlockSplit[j].parts;
          for (int q = 0; q < t.parts; ++q) t.part_rows[q] = p.shape[0] / t.parts;
          if (c.llama() && (param == GptBlockParam::qkv_w || param == GptBlockParam::qkv_b)) {
            t.part_rows[0] = c.n_embd;
            t.part_rows[1] = t.part_rows[2] = c.kv_rows();
          }
          if (c.llama() && param == GptBlockParam::fc_w) {
            t.parts = 2;
            t.part_rows[0] = t.part_rows[1] = c.ffn();
          }
        }
    }
    if (tp == 1) t.kind = ShardKind::replicated;
    t.numel = t.kind == ShardKind::replicated ? p.shape.numel() : p.shape.numel() / tp;
    if (vocab_tensor(p)) t.numel = vocab_slice_ * c.n_embd;
    t.offset = offset;
    offset += t.numel;
    tensors_.push_back(t);
  }
  size_ = offset;
  // The embeddings' tensors come first (one without learned positions), then the layers.
  const size_t embeddings = c.learned_positions() ? 2 : 1;
  layers_begin_ = tensors_[embeddings].offset;
  wpe_ = c.learned_positions() ? tensors_[1].offset : layers_begin_;
  if (end_ > first_) {
    // Block offsets from the local sizes; an entry without values (the llama family's
    // biases) starts where the next one does.
    int64_t in_block = 0;
    size_t i = embeddings;
    for (int j = 0; j < kGptBlockParams; ++j) {
      block_offset_[j] = in_block;
      if (full.numel(static_cast<GptBlockParam>(j)) == 0) continue;
      in_block += tensors_[i++].numel;
    }
    layer_size_ = in_block;
  }
}

int64_t GptShardLayout::unit_begin(int u) const {
  if (u == 0) return 0;
  return layers_begin_ + (u - 1) * layer_size_;  // u = layers() + 1: the final norm
}

void GptShardLayout::runs(const ShardedTensor& t,
                          const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  const int64_t total = t.full.shape.numel();
  if (t.kind == ShardKind::replicated) {
    fn(t.full.offset, t.offset, total);
    return;
  }
  const int64_t rows = t.full.shape.ndim >= 2 ? t.full.shape[0] : total;
  const int64_t cols = total / rows;
  if (t.kind == ShardKind::rows && vocab_tensor(t.full)) {  // the real rows only
    fn(t.full.offset + vocab_begin_ * cols, t.offset, vocab_rows_ * cols);
    return;
  }
  if (t.kind == ShardKind::rows) {
    int64_t full_row = 0, local_row = 0;
    for (int p = 0; p < t.parts; ++p) {
      const int64_t slice_rows = t.part_rows[p] / tp_;
      fn(t.full.offset + (full_row + rank_ * slice_rows) * cols, t.offset + local_row * cols,
         slice_rows * cols);
      full_row += t.part_rows[p];
      local_row += slice_rows;
    }
    return;
  }
  const int64_t slice_cols = cols / tp_;
  for (int64_t r = 0; r < rows; ++r)
    fn(t.full.offset + r * cols + rank_ * slice_cols, t.offset + r * slice_cols, slice_cols);
}

void GptShardLayout::runs_in(const ShardedTensor& t, int64_t begin, int64_t end,
                             const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  const int64_t total = t.full.shape.numel();
  if (end <= t.full.offset || begin >= t.full.offset + total) return;
  auto clipped = [&](int64_t f, int64_t l, int64_t n) {
    const int64_t lo = std::max(f, begin), hi = std::min(f + n, end);
    if (lo < hi) fn(lo, l + (lo - f), hi - lo);
  };
  if (t.kind != ShardKind::columns) {  // a few runs per tensor: all of them, clipped
    runs(t, clipped);
    return;
  }
  // One run per row: only the rows the range meets.
  const int64_t rows = t.full.shape[0], cols = total / rows, slice_cols = cols / tp_;
  const int64_t first = std::max<int64_t>(0, (begin - t.full.offset) / cols);
  const int64_t last = std::min(rows, (end - t.full.offset + cols - 1) / cols);
  for (int64_t r = first; r < last; ++r)
    clipped(t.full.offset + r * cols + rank_ * slice_cols, t.offset + r * slice_cols, slice_cols);
}

void GptShardLayout::extract(const float* full, float* local) const {
  if (vocab_rows_ < vocab_slice_)  // the slices' padding rows
    for (const auto& t : tensors_)
      if (vocab_tensor(t.full))
        std::memset(local + t.offset + vocab_rows_ * config_.n_embd, 0,
                    size_t((vocab_slice_ - vocab_rows_) * config_.n_embd) * 4);
  for (const auto& t : tensors_)
    runs(t, [&](int64_t f, int64_t l, int64_t n) { std::memcpy(local + l, full + f, size_t(n) * 4); });
}

void GptShardLayout::place(const float* local, float* full, bool replicated) const {
  for (const auto& t : tensors_) {
    if (t.kind == ShardKind::replicated && !replicated) continue;
    runs(t, [&](int64_t f, int64_t l, int64_t n) { std::memcpy(full + f, local + l, size_t(n) * 4); });
  }
}

void GptShardLayout::for_each_in(
    int64_t begin, int64_t end,
    const std::function<void(int64_t, int64_t, const ShardedTensor&)>& fn) const {
  for (const auto& t : tensors_) {
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo < hi) fn(lo, hi, t);
  }
}

}  // namespace aiscale::nn
