// A parameter server: one rank that holds a contiguous shard of the flat parameter
// vector and the AdamW moments of that shard, and applies every worker's gradient as it
// arrives (one optimiser step per push, no barrier between workers). It answers pulls
// with its current weights and version (the number of updates it has applied).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "aiscale/ops/ops.h"
#include "aiscale/parallel/param_server/channel.h"
#include "aiscale/parallel/param_server/sharding.h"

namespace aiscale::parallel::param_server {

struct ServerOptions {
  int64_t steps = 1;          // train.steps: steps per worker (the schedule's length)
  int64_t max_staleness = 0;  // parallel.max_staleness; 0: every gradient is applied
  ops::AdamWParams adamw;     // beta1, beta2, eps, weight decay (lr and step set per update)
  // The learning rate of a schedule step (train/schedule.h for the run's config).
  std::function<double(int64_t step)> lr_of_step;
};

class ParameterServer {
 public:
  // `params`: the initial weights of the shard `range`; `decay`: 1 where weight decay
  // applies, one per value of the shard.
  ParameterServer(Channel& channel, const Roles& roles, ShardRange range, std::vector<float> params,
                  const std::vector<uint8_t>& decay, ServerOptions options);
  // Serves pulls and pushes until every worker has sent its done message.
  void serve();
  // After serve(): the shard's weights, m and v (3 x shard values, one message) to `rank`.
  void send_final_state(int rank);
  // After serve(): the shard's final weights to every worker (see receive_final_weights).
  void send_final_weights();
  // After serve(): the staleness statistics to `rank` (see receive_stats).
  void send_stats(int rank);
  const StalenessStats& stats() const { return stats_; }
  int64_t version() const { return version_; }

 private:
  void on_pull(int worker_rank);
  void on_push(int worker_rank);
  void apply(const float* grad, double grad_scale);

  Channel& channel_;
  Roles roles_;
  ShardRange range_;
  std::vector<float> params_, m_, v_, grad_;
  // The shard as runs of equal weight decay: [begin, end) offsets, decays.
  struct DecayRun {
    int64_t begin, end;
    bool decays;
  };
  std::vector<DecayRun> runs_;
  ServerOptions options_;
  int64_t version_ = 0;
  StalenessStats stats_;
  // Per worker (by rank): the staleness of its last push and whether it was applied.
  std::vector<double> last_staleness_, last_applied_;
};

// Rank 0's side of send_stats: one server's statistics.
StalenessStats receive_stats(Channel& channel, int server_rank);

}  // namespace aiscale::parallel::param_server
