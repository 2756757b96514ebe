#include "aiscale/optim/data_parallel.h"

#include <algorithm>

#include "aiscale/core/error.h"

namespace aiscale::optim {
namespace {

// A setter's range into the whole vector `pending`, sized on the first range (begin 0).
void stage_range(std::vector<float>& pending, const DataParallel::FlatRange& r, const float* in) {
  AISCALE_CHECK(r.begin >= 0 && r.count >= 0 && r.begin + r.count <= r.total,
                "range [{}, {}) outside a model of {} values", r.begin, r.begin + r.count, r.total);
  if (r.begin == 0) pending.assign(static_cast<size_t>(r.total), 0.0f);
  AISCALE_CHECK(static_cast<int64_t>(pending.size()) == r.total,
                "state ranges must be set in ascending order from 0");
  std::copy(in, in + r.count, pending.begin() + r.begin);
}

}  // namespace

void DataParallel::get_params_range(const FlatRange& r, float* out) {
  std::vector<float> whole(static_cast<size_t>(r.total));
  get_params(whole.data());
  std::copy(whole.begin() + r.begin, whole.begin() + r.begin + r.count, out);
}

void DataParallel::get_state_range(int k, const FlatRange& r, float* out) {
  std::vector<float> whole(static_cast<size_t>(r.total));
  get_state(k, whole.data());
  std::copy(whole.begin() + r.begin, whole.begin() + r.begin + r.count, out);
}

void DataParallel::set_params_range(const FlatRange& r, const float* in) {
  stage_range(pending_, r, in);
  if (!r.last()) return;
  set_params(pending_.data());
  pending_ = {};
}

void DataParallel::set_state_range(int k, const FlatRange& r, const float* in) {
  stage_range(pending_, r, in);
  if (!r.last()) return;
  set_state(k, pending_.data());
  pending_ = {};
}

}  // namespace aiscale::optim
