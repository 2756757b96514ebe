// The arithmetic of parameter-server training, free of MPI: which ranks serve and which
// work, which contiguous slice of the flat parameter vector each server holds, the
// learning-rate step of a server update, and the staleness statistics of the updates.
#pragma once
#include <cstdint>
#include <string>

namespace aiscale::parallel::param_server {

// The roles of a job of `world` ranks with `servers` parameter servers: the last
// `servers` ranks serve, the ranks before them work. Throws Error (naming
// parallel.parameter_servers and the fix) when no rank is left to work.
struct Roles {
  int world = 1, servers = 1;
  int workers() const { return world - servers; }
  bool is_server(int rank) const { return rank >= workers(); }
  int server_index(int rank) const { return rank - workers(); }  // 0-based among the servers
  int server_rank(int index) const { return workers() + index; }
};
Roles make_roles(int world, int servers);

// Contiguous, balanced shards of n values over `servers`: the first n % servers shards
// hold one value more. A server may hold nothing when there are more servers than values.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange shard_range(int64_t n, int servers, int index);

// The schedule step of a server's update number `update` (0-based): a run of `steps`
// steps per worker makes workers x steps updates, so every `workers` updates advance the
// schedule by one step; clamped to the last step (updates of a resumed or longer run).
int64_t schedule_step(int64_t update, int workers, int64_t steps);

// Staleness of the applied updates: server version at apply time minus the version the
// gradient was computed from. Gradients staler than the bound are counted as discarded.
struct StalenessStats {
  int64_t updates = 0, discarded = 0;
  double sum = 0;
  int64_t max = 0;
  void add_applied(int64_t staleness);
  void add_discarded() { ++discarded; }
  void merge(const StalenessStats& other);
  double mean() const { return updates > 0 ? sum / double(updates) : 0.0; }
};

// Whether a gradient of this staleness is applied under parallel.max_staleness (0: any).
inline bool within_bound(int64_t staleness, int64_t max_staleness) {
  return max_staleness <= 0 || staleness <= max_staleness;
}

}  // namespace aiscale::parallel::param_server
