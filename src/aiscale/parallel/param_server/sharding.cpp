#include "aiscale/parallel/param_server/sharding.h"

#include <algorithm>

#include "aiscale/core/error.h"

namespace aiscale::parallel::param_server {

Roles make_roles(int world, int servers) {
  if (servers < 1)
    fail("parallel.parameter_servers = {}: a parameter-server run needs at least one server "
         "(0 turns parameter servers off)", servers);
  if (servers >= world)
    fail("parallel.parameter_servers = {} leaves no worker among the job's {} rank(s): the last "
         "{} ranks serve and the others train, so start at least {} ranks (aiscale launch -n {}) "
         "or lower parallel.parameter_servers to at most {}", servers, world, servers,
         servers + 1, servers + 1, std::max(0, world - 1));
  Roles r;
  r.world = world;
  r.servers = servers;
  return r;
}

ShardRange shard_range(int64_t n, int servers, int index) {
  if (servers < 1 || index < 0 || index >= servers || n < 0)
    fail("internal: shard {} of {} over {} values", index, servers, n);
  const int64_t base = n / servers, extra = n % servers;
  ShardRange r;
  r.begin = base * index + std::min<int64_t>(index, extra);
  r.end = r.begin + base + (index < extra ? 1 : 0);
  return r;
}

int64_t schedule_step(int64_t update, int workers, int64_t steps) {
  const int64_t step = update / std::max(1, workers);
  return std::min(step, std::max<int64_t>(0, steps - 1));
}

void StalenessStats::add_applied(int64_t staleness) {
  ++updates;
  sum += double(staleness);
  max = std::max(max, staleness);
}

void StalenessStats::merge(const StalenessStats& o) {
  updates += o.updates;
  discarded += o.discarded;
  sum += o.sum;
  max = std::max(max, o.max);
}

}  // namespace aiscale::parallel::param_server
