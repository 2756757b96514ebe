// The study TOML (sweep/study.h): parsed and validated, then expanded into its points and
// each point's command line, as `aiscale scale` does. Relative paths (the train config)
// are taken from the source tree's configs/studies, where the seed studies live.
#pragma once
#include <algorithm>

#include "../fuzz_support.h"
#include "aiscale/sweep/study.h"

namespace aiscale::fuzz {

inline int fuzz_study(const uint8_t* data, size_t size) {
  static const std::string base_dir = std::string(AISCALE_SOURCE_DIR) + "/configs/studies";
  return expect_user_errors([&] {
    const sweep::Study s = sweep::parse_study(std::string(as_text(data, size)), "fuzz-study.toml", base_dir);
    (void)s.study_id();
    (void)s.workload_text();
    const std::vector<sweep::PointSpec> points = sweep::study_points(s);
    const std::string point_dir = (scratch_dir() / "point").string();
    for (size_t i = 0; i < std::min<size_t>(points.size(), 4); ++i) {
      (void)sweep::point_argv(s, points[i], point_dir);
      (void)sweep::point_total_steps(s, points[i]);
    }
  });
}

}  // namespace aiscale::fuzz
