// Bookkeeping of a ring of staging bytes shared with peers (the copy-engine gradient
// exchange, copy_engine_group.h): each call takes a contiguous region; a region wraps to
// the start when it does not fit before the end; and the caller learns the latest earlier
// call that used any byte of the new region, whose consumption by the peer it must await
// before writing there again. Host-only, no CUDA: unit-tested on the CPU.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace aiscale::parallel {

class StagingRing {
 public:
  explicit StagingRing(size_t bytes) : bytes_(bytes) {}

  struct Take {
    size_t offset;        // where the call's region starts
    uint32_t reuse_wait;  // latest earlier call that used some of it (0: none)
  };

  // Takes `need` bytes for call `call` (calls numbered 1, 2, ... in order).
  Take take(size_t need, uint32_t call) {
    if (need > bytes_)
      throw std::invalid_argument("staging ring: " + std::to_string(need) + " bytes asked of " +
                                  std::to_string(bytes_));
    if (pos_ + need > bytes_) pos_ = 0;
    const size_t lo = pos_, hi = pos_ + need;
    Take t{lo, 0};
    std::vector<Region>& keep = scratch_;  // reused: no allocation per call once warm
    keep.clear();
    for (const Region& r : regions_) {
      if (r.hi <= lo || r.lo >= hi) {
        keep.push_back(r);
        continue;
      }
      t.reuse_wait = std::max(t.reuse_wait, r.call);
      // What this region leaves of an older one stays tracked under the older call.
      if (r.lo < lo) keep.push_back({r.lo, lo, r.call});
      if (r.hi > hi) keep.push_back({hi, r.hi, r.call});
    }
    keep.push_back({lo, hi, call});
    regions_.swap(keep);
    pos_ = hi;
    return t;
  }

  size_t bytes() const { return bytes_; }
  size_t live_regions() const { return regions_.size(); }  // tracked pieces

 private:
  struct Region {
    size_t lo, hi;
    uint32_t call;
  };
  size_t bytes_;
  size_t pos_ = 0;
  std::vector<Region> regions_, scratch_;
};

}  // namespace aiscale::parallel
