#include "aiscale/parallel/param_server/worker.h"

#include <algorithm>

namespace aiscale::parallel::param_server {

ParameterClient::ParameterClient(Channel& channel, const Roles& roles, int64_t num_params)
    : channel_(channel), roles_(roles) {
  for (int s = 0; s < roles.servers; ++s) ranges_.push_back(shard_range(num_params, roles.servers, s));
  versions_.assign(size_t(roles.servers), 0.0);
}

PullResult ParameterClient::pull(float* params) {
  const double request = 0;
  // Every request first, then the answers: the servers work on them side by side.
  for (int s = 0; s < roles_.servers; ++s) channel_.send(&request, 1, roles_.server_rank(s), Tag::pull);
  PullResult r;
  for (int s = 0; s < roles_.servers; ++s) {
    const int server = roles_.server_rank(s);
    double header[3] = {};  // version, staleness of my last push, applied
    channel_.recv(header, 3, server, Tag::weights_header);
    channel_.recv(params + ranges_[size_t(s)].begin, ranges_[size_t(s)].size(), server, Tag::weights);
    versions_[size_t(s)] = header[0];
    r.version += int64_t(header[0]);
    r.last_staleness = std::max(r.last_staleness, int64_t(header[1]));
    r.last_applied = r.last_applied && header[2] != 0.0;
  }
  return r;
}

void ParameterClient::push(const float* grads, double grad_scale, double loss) {
  for (int s = 0; s < roles_.servers; ++s) {
    const int server = roles_.server_rank(s);
    const double header[3] = {versions_[size_t(s)], grad_scale, loss};
    channel_.send(header, 3, server, Tag::push_header);
    channel_.send(grads + ranges_[size_t(s)].begin, ranges_[size_t(s)].size(), server, Tag::push_gradient);
  }
}

void ParameterClient::done(int64_t steps) {
  const double n = double(steps);
  for (int s = 0; s < roles_.servers; ++s) channel_.send(&n, 1, roles_.server_rank(s), Tag::done);
  channel_.flush();
}

void ParameterClient::receive_final_weights(float* params) {
  for (int s = 0; s < roles_.servers; ++s)
    channel_.recv(params + ranges_[size_t(s)].begin, ranges_[size_t(s)].size(), roles_.server_rank(s),
                  Tag::weights);
}

void ParameterClient::receive_final_state(float* params, float* m, float* v) {
  for (int s = 0; s < roles_.servers; ++s) {
    const ShardRange r = ranges_[size_t(s)];
    std::vector<float> all(size_t(3 * r.size()));
    channel_.recv(all.data(), int64_t(all.size()), roles_.server_rank(s), Tag::final_state);
    std::copy_n(all.begin(), r.size(), params + r.begin);
    std::copy_n(all.begin() + r.size(), r.size(), m + r.begin);
    std::copy_n(all.begin() + 2 * r.size(), r.size(), v + r.begin);
  }
}

}  // namespace aiscale::parallel::param_server
