// A worker's side of parameter-server training: pull the weights of every server's
// shard, push a gradient's shards back, each server applying it when it arrives.
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/parallel/param_server/channel.h"
#include "aiscale/parallel/param_server/sharding.h"

namespace aiscale::parallel::param_server {

struct PullResult {
  // The staleness of this worker's previous push (the largest over the servers; each
  // server measures its own: versions at apply time minus versions pulled), and whether
  // every server applied it (false: at least one discarded it as staler than
  // parallel.max_staleness). Meaningless on the first pull.
  int64_t last_staleness = 0;
  bool last_applied = true;
  int64_t version = 0;  // the sum of the servers' versions: updates applied so far, per shard
};

class ParameterClient {
 public:
  ParameterClient(Channel& channel, const Roles& roles, int64_t num_params);
  // Every shard's current weights into params (num_params values); the versions pulled
  // are what the next push is computed from.
  PullResult pull(float* params);
  // The gradient (num_params values), computed from the weights of the last pull, scaled
  // by grad_scale (clipping) on the servers; `loss` travels along for the record.
  void push(const float* grads, double grad_scale, double loss);
  // No more pushes from this worker.
  void done(int64_t steps);
  // After done(): the weights every server ends with (the others' last pushes included).
  void receive_final_weights(float* params);
  // Rank 0, after every server has finished: the whole weights and AdamW moments.
  void receive_final_state(float* params, float* m, float* v);

 private:
  Channel& channel_;
  Roles roles_;
  std::vector<ShardRange> ranges_;
  std::vector<double> versions_;  // per server, at the last pull
};

}  // namespace aiscale::parallel::param_server
