#include "aiscale/nn/models/gpt_cpu_state.h"

#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_layout.h"

namespace aiscale::nn {

GptCpuState::GptCpuState(const GptConfig& c, const GptRunOptions& o, const GptPlacement& place)
    : config_(c), place_(place), layout_(c, place.tensor.size, place.tensor.rank) {
  const int U = layout_.units();
  offset_.assign(size_t(U), -1);
  held_index_.assign(size_t(U), -1);
  for (int u = 0; u < U; ++u) {
    // The embeddings: the first stage's, and the last stage's copy for a tied LM head.
    const bool held = u == 0       ? place.first() || (place.last() && c.tied())
                      : u == U - 1 ? place.last()
                                   : u - 1 >= place.first_layer && u - 1 < place.end_layer;
    if (!held) continue;
    held_index_[u] = static_cast<int>(held_.size());
    held_.push_back(u);
    offset_[u] = size_;
    size_ += layout_.unit_end(u) - layout_.unit_begin(u);
  }
  if (place.zero_stage >= 2) {
    std::vector<int64_t> bounds;
    for (int u : held_) bounds.push_back(offset_[u]);
    bounds.push_back(size_);
    shards_.emplace(std::move(bounds), place.data);
    const int64_t s = shards_->shards_size();
    grads_ = Arena(s * 4, Device::cpu);
    moment_values_ = s;
    const int64_t emb = holds(0) ? layout_.unit_end(0) : 0;
    const int64_t lnf = holds(U - 1) ? layout_.size() - layout_.lnf_w() : 0;
    grad_units_ = Arena((emb + layout_.layer_size() + lnf) * 4, Device::cpu);
    if (place.zero_stage == 3) {
      AISCALE_CHECK(place.stages == 1, "ZeRO-3 with pipeline stages");
      params_ = Arena(s * 4, Device::cpu);
      // The blocks' gather buffers: embeddings, two layers in turn, final norm.
      const int64_t layers = c.n_layer > 1 ? 2 : 1;
      gathered_ = Arena((emb + layers * layout_.layer_size() + lnf) * 4, Device::cpu);
      gathered_.zero();
    } else {
      params_ = Arena(size_ * 4, Device::cpu);
    }
  } else {
    params_ = Arena(size_ * 4, Device::cpu);
    grads_ = Arena(size_ * 4, Device::cpu);
    moment_values_ = size_;
  }
  params_.zero();
  grads_.zero();
  // Every rank draws the whole initialisation from the seed, a range at a time, and keeps
  // its part: the same values as one rank's model, whatever the layout, without a
  // whole-model buffer.
  gpt_init_ranges(c, o.seed, [&](int64_t begin, int64_t count, const float* values) {
    from_full_range(Kind::params, begin, count, values);
  });
}

float* GptCpuState::unit_params(int u, bool gather) {
  if (place_.zero_stage != 3) return f32(params_) + offset_[u];
  const int U = layout_.units();
  const int64_t emb = layout_.unit_end(0), layer = layout_.layer_size();
  const int64_t layers = config_.n_layer > 1 ? 2 : 1;
  float* dst = u == 0       ? f32(gathered_)
               : u == U - 1 ? f32(gathered_) + emb + layers * layer
                            : f32(gathered_) + emb + ((u - 1) % 2) * layer;
  if (gather) {
    const int k = held_index_[u];
    shards_->gather(k, f32(params_) + shards_->shard_offset(k), dst);
  }
  return dst;
}

void GptCpuState::prefetch_params(int u) {
  if (place_.zero_stage != 3 || u < 0 || !holds(u)) return;
  const int k = held_index_[u];
  shards_->prefetch(k, f32(params_) + shards_->shard_offset(k));
}

float* GptCpuState::unit_grads(int u, bool fresh) {
  if (!shards_) return f32(grads_) + offset_[u];
  const int U = layout_.units();
  const int64_t emb = holds(0) ? layout_.unit_end(0) : 0, layer = layout_.layer_size();
  float* g = u == 0 ? f32(grad_units_) : u == U - 1 ? f32(grad_units_) + emb + layer
                                                    : f32(grad_units_) + emb;
  if (fresh) std::memset(g, 0, size_t(layout_.unit_end(u) - layout_.unit_begin(u)) * 4);
  return g;
}

void GptCpuState::unit_done(int u, float* g) {
  // With sequence parallelism the replicated tensors (LayerNorms, biases of the
  // row-parallel layers, the position embedding) saw only this rank's tokens.
  const parallel::tensor::TensorGroup& t = place_.tensor;
  const int64_t begin = layout_.unit_begin(u);
  if (t.sequence_parallel && t.split())
    layout_.for_each_in(begin, layout_.unit_end(u), [&](int64_t lo, int64_t hi, const ShardedTensor& s) {
      if (s.kind == ShardKind::replicated) parallel::tensor::sum_over_ranks(t, g + (lo - begin), hi - lo);
    });
  if (shards_) {
    const int k = held_index_[u];
    shards_->reduce_scatter_add(k, g, f32(grads_) + shards_->shard_offset(k));
  }
}

void GptCpuState::finish_backward(bool self_sync) {
  if (!shards_ && self_sync && place_.data) place_.data->allreduce_sum(f32(grads_), size_);
  if (place_.stages > 1 && place_.embedding && config_.tied()) {  // the tied embeddings of both ends
    const int k = held_index_[0];
    if (shards_) place_.embedding->allreduce_sum(f32(grads_) + shards_->shard_offset(k), shards_->shard(k));
    else place_.embedding->allreduce_sum(f32(grads_) + offset_[0], layout_.unit_end(0));
  }
}

void GptCpuState::for_each_piece(
    const std::function<void(int, int64_t, int64_t, const ShardedTensor&, int64_t)>& fn) const {
  for (size_t k = 0; k < held_.size(); ++k) {
    const int u = held_[k];
    const int64_t base = layout_.unit_begin(u);
    int64_t lo = base, hi = layout_.unit_end(u);
    if (shards_) {
      lo = shards_->owned_begin(int(k)) - offset_[u] + base;
      hi = shards_->owned_end(int(k)) - offset_[u] + base;
    }
    layout_.for_each_in(lo, hi, [&](int64_t a, int64_t b, const ShardedTensor& t) {
      const int64_t index = shards_ ? shards_->shard_index(int(k), a - base + offset_[u])
                                    : offset_[u] + a - base;
      fn(u, a, b, t, index);
    });
  }
}

double GptCpuState::grad_sum_squares(bool self_sync) {
  if (!self_sync) return ops::sum_squares(f32(grads_), size_);
  // Each value once: a replicated tensor's gradient is the same on every tensor rank, and
  // the last stage's copy of the embeddings has the first stage's gradient.
  double s = 0.0;
  for_each_piece([&](int u, int64_t lo, int64_t hi, const ShardedTensor& t, int64_t index) {
    if (mirror(u) || (t.kind == ShardKind::replicated && place_.tensor.rank != 0)) return;
    s += ops::sum_squares(f32(grads_) + index, hi - lo);
  });
  if (shards_ && place_.data) place_.data->allreduce_sum(&s, 1);
  if (place_.tensor.split()) place_.tensor.comm->allreduce_sum(&s, 1);
  if (place_.pipeline) place_.pipeline->allreduce_sum(&s, 1);
  return s;
}

void GptCpuState::ensure_moments() {
  if (m_.bytes() > 0 || moment_values_ == 0) return;
  m_ = Arena(moment_values_ * 4, Device::cpu);
  v_ = Arena(moment_values_ * 4, Device::cpu);
  m_.zero();
  v_.zero();
}

void GptCpuState::update(const ops::Backend& ops, const ops::AdamWParams& hp, bool decay_embeddings) {
  ensure_moments();
  for_each_piece([&](int u, int64_t lo, int64_t hi, const ShardedTensor& t, int64_t index) {
    ops::AdamWParams h = hp;
    if (!GptLayout::decays(t.full, decay_embeddings)) h.weight_decay = 0.0f;
    float* p = place_.zero_stage == 3 ? f32(params_) + index
                                      : f32(params_) + offset_[u] + (lo - layout_.unit_begin(u));
    ops.adamw_update(p, f32(grads_) + index, f32(m_) + index, f32(v_) + index, hi - lo, h);
  });
  if (place_.zero_stage != 2) return;
  // ZeRO-2: every rank holds the whole parameters again.
  for (size_t k = 0; k < held_.size(); ++k)
    shards_->gather(int(k), f32(params_) + shards_->owned_begin(int(k)), f32(params_) + offset_[held_[k]]);
}

std::vector<float> GptCpuState::local_values(Kind kind) {
  std::vector<float> local(size_t(layout_.size()), 0.0f);
  Arena& a = arena(kind);
  for (size_t k = 0; k < held_.size(); ++k) {
    const int u = held_[k];
    if (mirror(u)) continue;  // the first stage's copy counts
    float* dst = local.data() + layout_.unit_begin(u);
    if (sharded(kind)) shards_->gather(int(k), f32(a) + shards_->shard_offset(int(k)), dst);
    else std::memcpy(dst, f32(a) + offset_[u], size_t(layout_.unit_end(u) - layout_.unit_begin(u)) * 4);
  }
  return local;
}

void GptCpuState::to_full(Kind kind, float* out) {
  std::vector<float> local = local_values(kind);
  if (place_.pipeline) place_.pipeline->allreduce_sum(local.data(), int64_t(local.size()));
  const parallel::tensor::TensorGroup& t = place_.tensor;
  if (!t.split()) {
    std::memcpy(out, local.data(), local.size() * 4);
    return;
  }
  const int64_t n = config_.num_params();
  std::fill(out, out + n, 0.0f);
  layout_.place(local.data(), out, t.rank == 0);
  t.comm->allreduce_sum(out, n);
}

void GptCpuState::from_full(Kind kind, const float* in) {
  std::vector<float> local(size_t(layout_.size()));
  layout_.extract(in, local.data());
  Arena& a = arena(kind);
  for (size_t k = 0; k < held_.size(); ++k) {
    const int u = held_[k];
    const float* src = local.data() + layout_.unit_begin(u);
    if (!sharded(kind)) {
      std::memcpy(f32(a) + offset_[u], src, size_t(layout_.unit_end(u) - layout_.unit_begin(u)) * 4);
      continue;
    }
    float* dst = f32(a) + shards_->shard_offset(int(k));
    std::fill(dst, dst + shards_->shard(int(k)), 0.0f);
    const int64_t from = shards_->owned_begin(int(k)) - offset_[u];
    std::copy(src + from, src + from + shards_->owned_end(int(k)) - shards_->owned_begin(int(k)), dst);
  }
}

void GptCpuState::for_each_run_in(
    int64_t begin, int64_t end, bool mirrors, bool replicated,
    const std::function<void(int, int64_t, int64_t, int64_t)>& fn) const {
  for (size_t k = 0; k < held_.size(); ++k) {
    const int u = held_[k];
    if (mirror(u) && !mirrors) continue;
    const int64_t unit0 = layout_.unit_begin(u);
    layout_.for_each_in(unit0, layout_.unit_end(u), [&](int64_t, int64_t, const ShardedTensor& t) {
      if (t.kind == ShardKind::replicated && !replicated) return;
      layout_.runs_in(t, begin, end, [&](int64_t f, int64_t l, int64_t n) {
        fn(int(k), offset_[u] + (l - unit0), f, n);
      });
    });
  }
}

void GptCpuState::to_full_range(Kind kind, int64_t begin, int64_t count, float* out) {
  std::fill(out, out + count, 0.0f);
  Arena& a = arena(kind);
  const float* values = f32(a);
  const parallel::tensor::TensorGroup& t = place_.tensor;
  const bool shard = sharded(kind);
  for_each_run_in(begin, begin + count, /*mirrors=*/false, /*replicated=*/!t.split() || t.rank == 0,
                  [&](int k, int64_t h, int64_t f, int64_t n) {
    float* dst = out + (f - begin);
    if (!shard) {
      std::memcpy(dst, values + h, size_t(n) * 4);
      return;
    }
    // Only the part this data rank owns: the others add theirs.
    const int64_t lo = std::max(h, shards_->owned_begin(k));
    const int64_t hi = std::min(h + n, shards_->owned_end(k));
    if (lo < hi) std::memcpy(dst + (lo - h), values + shards_->shard_index(k, lo), size_t(hi - lo) * 4);
  });
  if (shard && place_.data) place_.data->allreduce_sum(out, count);
  if (place_.pipeline) place_.pipeline->allreduce_sum(out, count);
  if (t.split()) t.comm->allreduce_sum(out, count);
}

void GptCpuState::from_full_range(Kind kind, int64_t begin, int64_t count, const float* in) {
  Arena& a = arena(kind);
  float* values = f32(a);
  const bool shard = sharded(kind);
  for_each_run_in(begin, begin + count, /*mirrors=*/true, /*replicated=*/true,
                  [&](int k, int64_t h, int64_t f, int64_t n) {
    const float* src = in + (f - begin);
    if (!shard) {
      std::memcpy(values + h, src, size_t(n) * 4);
      return;
    }
    const int64_t lo = std::max(h, shards_->owned_begin(k));
    const int64_t hi = std::min(h + n, shards_->owned_end(k));
    if (lo < hi) std::memcpy(values + shards_->shard_index(k, lo), src + (lo - h), size_t(hi - lo) * 4);
  });
}

size_t GptCpuState::bytes() const {
  return params_.bytes() + grads_.bytes() + m_.bytes() + v_.bytes() + gathered_.bytes() +
         grad_units_.bytes();
}

size_t GptCpuState::optimizer_bytes() const {
  return m_.bytes() + v_.bytes() +
         (shards_ ? size_t(4) * size_t(shards_->shards_size()) : params_.bytes());
}

}  // namespace aiscale::nn
