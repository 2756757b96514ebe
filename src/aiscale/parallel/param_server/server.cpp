#include "aiscale/parallel/param_server/server.h"

#include <algorithm>
#include <cmath>

#include "aiscale/core/error.h"

namespace aiscale::parallel::param_server {

ParameterServer::ParameterServer(Channel& channel, const Roles& roles, ShardRange range,
                                 std::vector<float> params, const std::vector<uint8_t>& decay,
                                 ServerOptions options)
    : channel_(channel), roles_(roles), range_(range), params_(std::move(params)),
      options_(std::move(options)) {
  const size_t n = static_cast<size_t>(range.size());
  if (params_.size() != n || decay.size() != n)
    fail("internal: parameter server shard of {} values given {} weights and {} decay flags", n,
         params_.size(), decay.size());
  m_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
  grad_.assign(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    const bool d = decay[i] != 0;
    if (runs_.empty() || runs_.back().decays != d) runs_.push_back({int64_t(i), int64_t(i), d});
    runs_.back().end = int64_t(i) + 1;
  }
  last_staleness_.assign(static_cast<size_t>(roles.world), 0.0);
  last_applied_.assign(static_cast<size_t>(roles.world), 1.0);
}

void ParameterServer::serve() {
  int done = 0;
  while (done < roles_.workers()) {
    const Incoming in = channel_.next();
    if (in.source < 0 || in.source >= roles_.workers())
      fail("parameter server: a message from rank {}, which is not a worker", in.source);
    switch (in.tag) {
      case Tag::pull: on_pull(in.source); break;
      case Tag::push_header: on_push(in.source); break;
      case Tag::done: {
        double steps = 0;
        channel_.recv(&steps, 1, in.source, Tag::done);
        ++done;
        break;
      }
      default:
        fail("parameter server: unexpected message (tag {}) from rank {}", static_cast<int>(in.tag),
             in.source);
    }
  }
  channel_.flush();
}

void ParameterServer::on_pull(int worker) {
  double request = 0;
  channel_.recv(&request, 1, worker, Tag::pull);
  const double header[3] = {double(version_), last_staleness_[size_t(worker)], last_applied_[size_t(worker)]};
  channel_.send(header, 3, worker, Tag::weights_header);
  channel_.send(params_.data(), range_.size(), worker, Tag::weights);
}

void ParameterServer::on_push(int worker) {
  double header[3] = {};  // version computed from, gradient scale (clipping), loss
  channel_.recv(header, 3, worker, Tag::push_header);
  channel_.recv(grad_.data(), range_.size(), worker, Tag::push_gradient);
  const int64_t staleness = version_ - static_cast<int64_t>(header[0]);
  last_staleness_[size_t(worker)] = double(staleness);
  if (!within_bound(staleness, options_.max_staleness)) {
    // Too stale: not applied; the worker's next pull brings it fresh weights.
    stats_.add_discarded();
    last_applied_[size_t(worker)] = 0.0;
    return;
  }
  apply(grad_.data(), header[1]);
  stats_.add_applied(staleness);
  last_applied_[size_t(worker)] = 1.0;
}

void ParameterServer::apply(const float* grad, double grad_scale) {
  ops::AdamWParams hp = options_.adamw;
  hp.lr = static_cast<float>(options_.lr_of_step(schedule_step(version_, roles_.workers(), options_.steps)));
  hp.step = version_ + 1;
  hp.grad_scale = static_cast<float>(grad_scale);
  const ops::Backend& ops = ops::cpu_backend();
  for (const DecayRun& r : runs_) {
    ops::AdamWParams h = hp;
    if (!r.decays) h.weight_decay = 0.0f;
    ops.adamw_update(params_.data() + r.begin, grad + r.begin, m_.data() + r.begin, v_.data() + r.begin,
                     r.end - r.begin, h);
  }
  ++version_;
}

void ParameterServer::send_final_state(int rank) {
  const size_t n = params_.size();
  std::vector<float> all(3 * n);
  std::copy(params_.begin(), params_.end(), all.begin());
  std::copy(m_.begin(), m_.end(), all.begin() + long(n));
  std::copy(v_.begin(), v_.end(), all.begin() + long(2 * n));
  channel_.send(all.data(), int64_t(all.size()), rank, Tag::final_state);
}

void ParameterServer::send_final_weights() {
  // Not flushed here: rank 0 receives its final state only after the run's last
  // collectives, which this rank must reach first.
  for (int w = 0; w < roles_.workers(); ++w) channel_.send(params_.data(), range_.size(), w, Tag::weights);
}

void ParameterServer::send_stats(int rank) {
  const double s[5] = {double(stats_.updates), double(stats_.discarded), stats_.sum, double(stats_.max),
                       double(version_)};
  channel_.send(s, 5, rank, Tag::final_stats);
}

StalenessStats receive_stats(Channel& channel, int server_rank) {
  double s[5] = {};
  channel.recv(s, 5, server_rank, Tag::final_stats);
  StalenessStats out;
  out.updates = int64_t(s[0]);
  out.discarded = int64_t(s[1]);
  out.sum = s[2];
  out.max = int64_t(s[3]);
  return out;
}

}  // namespace aiscale::parallel::param_server
