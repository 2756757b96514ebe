// ZeRO over the data-parallel ranks of a flat buffer cut into units (a model's blocks):
// each unit's values are split into `world` equal shards (the last one padded), and rank
// d keeps shard d of every unit. Gradients are reduce-scattered unit by unit into the
// shards as soon as a unit's backward completes (ZeRO-2); parameters kept as shards are
// all-gathered unit by unit right before the unit computes (ZeRO-3). Host memory, CPU
// ranks; the GPU model's ZeRO-1 is zero1.cuh.
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/parallel/comm.h"

namespace aiscale::optim {

class ZeroShards {
 public:
  // unit_bounds: U + 1 ascending offsets, unit u = [unit_bounds[u], unit_bounds[u + 1]).
  // `dp` may be null (one rank: each shard is its whole unit).
  ZeroShards(std::vector<int64_t> unit_bounds, parallel::Communicator* dp);

  int units() const { return static_cast<int>(bounds_.size()) - 1; }
  int64_t unit_begin(int u) const { return bounds_[u]; }
  int64_t unit_end(int u) const { return bounds_[u + 1]; }
  int64_t unit_size(int u) const { return unit_end(u) - unit_begin(u); }
  // Values per shard of unit u (padded), and where this rank's shard of u starts in its
  // buffer of shards.
  int64_t shard(int u) const { return (unit_size(u) + world_ - 1) / world_; }
  int64_t shard_offset(int u) const { return offsets_[u]; }
  // This rank's buffer of shards: the sum of shard(u) over the units.
  int64_t shards_size() const { return offsets_.back(); }
  // The flat range of unit u this rank owns (empty for a rank past a small unit's end).
  int64_t owned_begin(int u) const;
  int64_t owned_end(int u) const;
  // Position in the shard buffer of flat offset `i` (owned by this rank).
  int64_t shard_index(int u, int64_t i) const { return shard_offset(u) + i - owned_begin(u); }

  // dst (unit_size(u) values) = unit u gathered from every rank's shard; `mine` holds this
  // rank's owned values (owned_end - owned_begin of them; may lie inside dst).
  void gather(int u, const float* mine, float* dst);
  // Starts the gather of unit u (non-blocking where the communicator can), so that it
  // travels while the caller computes; the next gather(u, ...) completes it. One unit at a
  // time; `mine` may change after the call.
  void prefetch(int u, const float* mine);
  // Adds this rank's part of the sum over the ranks of `unit` (unit_size(u) values) into
  // `mine` (shard(u) values).
  void reduce_scatter_add(int u, const float* unit, float* mine);

 private:
  std::vector<int64_t> bounds_, offsets_;
  parallel::Communicator* dp_;
  int world_ = 1, rank_ = 0;
  std::vector<float> send_, recv_;  // one unit padded to world x shard
  std::vector<float> prefetch_send_, prefetch_recv_;
  int prefetched_ = -1;  // the unit whose gather is in flight
};

}  // namespace aiscale::optim
