#include "aiscale/train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace aiscale::train {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f}s", s);
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}

std::string format_count(double v) {
  if (!std::isfinite(v)) return "?";
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

Progress::Progress(std::string what, int64_t total, double interval_s)
    : what_(std::move(what)), total_(total), interval_s_(interval_s), tty_(::isatty(2) != 0) {}

void Progress::update(int64_t done, const std::string& detail) {
  double now = timer_.seconds();
  bool last = done >= total_;
  if (!tty_ && !last && now - last_print_ < interval_s_ && done != 1) return;
  if (tty_ && !last && now - last_print_ < 0.1) return;
  last_print_ = now;
  double rate = done > 0 ? now / static_cast<double>(done) : 0.0;
  double eta = rate * static_cast<double>(total_ - done);
  std::string line = fmt::format("{} {}/{} ({:.0f}%) | {} | elapsed {} | ETA {}", what_, done,
                                 total_, 100.0 * static_cast<double>(done) / static_cast<double>(total_),
                                 detail, format_duration(now), format_duration(eta));
  if (tty_) {
    fmt::print(stderr, "\r\033[2K{}", line);
    open_line_ = true;
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_ && open_line_) fmt::print(stderr, "\n");
  open_line_ = false;
}

}  // namespace aiscale::train
