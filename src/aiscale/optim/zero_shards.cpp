#include "aiscale/optim/zero_shards.h"

#include <algorithm>

namespace aiscale::optim {

ZeroShards::ZeroShards(std::vector<int64_t> unit_bounds, parallel::Communicator* dp)
    : bounds_(std::move(unit_bounds)), dp_(dp) {
  if (dp_) {
    world_ = dp_->world();
    rank_ = dp_->rank();
  }
  offsets_.push_back(0);
  int64_t widest = 0;
  for (int u = 0; u < units(); ++u) {
    offsets_.push_back(offsets_.back() + shard(u));
    widest = std::max(widest, shard(u) * world_);
  }
  send_.assign(static_cast<size_t>(widest), 0.0f);
  recv_.assign(static_cast<size_t>(widest), 0.0f);
  if (world_ > 1) {
    prefetch_send_.assign(static_cast<size_t>(widest / world_ + 1), 0.0f);
    prefetch_recv_.assign(static_cast<size_t>(widest), 0.0f);
  }
}

int64_t ZeroShards::owned_begin(int u) const {
  return std::min(unit_end(u), unit_begin(u) + rank_ * shard(u));
}
int64_t ZeroShards::owned_end(int u) const {
  return std::min(unit_end(u), unit_begin(u) + (rank_ + 1) * shard(u));
}

void ZeroShards::prefetch(int u, const float* mine) {
  if (world_ == 1 || prefetched_ >= 0) return;
  const int64_t s = shard(u), owned = owned_end(u) - owned_begin(u);
  std::fill(prefetch_send_.begin(), prefetch_send_.begin() + s, 0.0f);
  std::copy(mine, mine + owned, prefetch_send_.begin());
  dp_->allgather_async(prefetch_send_.data(), prefetch_recv_.data(), s);
  prefetched_ = u;
}

void ZeroShards::gather(int u, const float* mine, float* dst) {
  if (prefetched_ >= 0) {
    dp_->wait();
    const int done = prefetched_;
    prefetched_ = -1;
    if (done == u) {
      std::copy(prefetch_recv_.begin(), prefetch_recv_.begin() + unit_size(u), dst);
      return;
    }
  }
  const int64_t s = shard(u), owned = owned_end(u) - owned_begin(u);
  std::fill(send_.begin(), send_.begin() + s, 0.0f);
  std::copy(mine, mine + owned, send_.begin());
  if (world_ == 1) {
    std::copy(send_.begin(), send_.begin() + unit_size(u), dst);
    return;
  }
  dp_->allgather(send_.data(), recv_.data(), s);
  std::copy(recv_.begin(), recv_.begin() + unit_size(u), dst);
}

void ZeroShards::reduce_scatter_add(int u, const float* unit, float* mine) {
  const int64_t s = shard(u), n = unit_size(u);
  if (world_ == 1) {
    for (int64_t i = 0; i < n; ++i) mine[i] += unit[i];
    return;
  }
  std::copy(unit, unit + n, send_.begin());
  std::fill(send_.begin() + n, send_.begin() + s * world_, 0.0f);
  dp_->reduce_scatter_sum(send_.data(), recv_.data(), s);
  for (int64_t i = 0; i < s; ++i) mine[i] += recv_[i];
}

}  // namespace aiscale::optim
