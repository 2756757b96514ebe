#include "aiscale/parallel/data_parallel/bucket_plan.h"

#include <algorithm>
#include <map>

#include "aiscale/core/error.h"

namespace aiscale::parallel::dp {
namespace {

void check_tiling(const GradientOrder& order, int64_t size) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& s : order) {
    if (s.end <= s.begin)
      fail("gradient segment [{}, {}) of point {} is empty", s.begin, s.end, s.point);
    ranges.emplace_back(s.begin, s.end);
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b != at) fail("the gradient segments do not tile the buffer: a gap or overlap at {}", at);
    at = e;
  }
  if (at != size) fail("the gradient segments end at {}, the buffer at {}", at, size);
}

}  // namespace

int64_t bucket_values_for_mib(double mib) {
  return std::max<int64_t>(1, static_cast<int64_t>(mib * 1048576.0 / 4.0));
}

BucketPlan plan_buckets(const GradientOrder& order, int64_t size,
                        const BucketPlanOptions& options) {
  if (options.world < 1) fail("world size {} is invalid", options.world);
  check_tiling(order, size);
  const int64_t q = options.shard ? options.world : 1;
  const auto down = [q](int64_t x) { return x / q * q; };
  const auto up = [q](int64_t x) { return (x + q - 1) / q * q; };
  BucketPlan plan;
  plan.padded_size = up(size);

  std::vector<Bucket> buckets;
  if (!options.overlap) {
    buckets.push_back({0, plan.padded_size, kAfterBackward});
  } else {
    // Each address where a segment begins becomes a cut, rounded as that segment says;
    // a bucket's begin is also kept at or below its top (the rounded-up cuts of layers
    // that complete in several parts could otherwise pass it).
    std::map<int64_t, bool> round_up;
    for (const auto& s : order) round_up[s.begin] = s.round_begin_up;
    std::map<int64_t, int64_t> assigned;  // cuts already used as a bucket's begin
    const auto cut = [&](int64_t addr) -> int64_t {
      if (addr == size) return plan.padded_size;
      if (auto it = assigned.find(addr); it != assigned.end()) return it->second;
      return round_up.at(addr) ? up(addr) : down(addr);
    };
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t top = order[i].end;
      int64_t lowest = order[i].begin;
      int point = order[i].point;
      for (;;) {
        const int64_t top_cut = cut(top);
        const int64_t size_now = top_cut - std::min(cut(lowest), top_cut);
        const bool adjacent_next = i + 1 < order.size() && order[i + 1].end == lowest;
        if (order[i].cut_after || size_now >= options.bucket_values || !adjacent_next) break;
        ++i;
        lowest = order[i].begin;
        point = order[i].point;
      }
      const int64_t end = cut(top);
      const int64_t begin = std::min(cut(lowest), end);
      assigned[lowest] = begin;
      buckets.push_back({begin, end, point});
    }
  }

  int64_t offset = 0;
  for (Bucket& b : buckets) {
    if (b.end <= b.begin) continue;
    b.part = options.shard ? b.size() / options.world : b.size();
    b.shard_offset = offset;
    offset += b.part;
    plan.buckets.push_back(b);
  }
  // The buckets must cover the padded buffer once.
  std::vector<Bucket> sorted = plan.buckets;
  std::sort(sorted.begin(), sorted.end(), [](const Bucket& a, const Bucket& b) { return a.begin < b.begin; });
  int64_t at = 0;
  for (const Bucket& b : sorted) {
    AISCALE_CHECK(b.begin == at, "gradient buckets overlap or leave a gap at {}", at);
    at = b.end;
  }
  AISCALE_CHECK(at == plan.padded_size, "gradient buckets end at {}, not {}", at, plan.padded_size);
  plan.shard_size = options.shard ? plan.padded_size / options.world : plan.padded_size;
  return plan;
}

}  // namespace aiscale::parallel::dp
