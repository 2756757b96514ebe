// A live progress line for long work: on a terminal it redraws one line; otherwise it
// prints a line every `interval_s` seconds so logs stay readable.
#pragma once
#include <cstdint>
#include <string>

#include "aiscale/core/timer.h"

namespace aiscale::train {

class Progress {
 public:
  Progress(std::string what, int64_t total, double interval_s = 10.0);
  // done: units finished; detail: e.g. "loss 4.21 | 1,234 tok/s".
  void update(int64_t done, const std::string& detail);
  void finish();  // ends the terminal line

 private:
  std::string what_;
  int64_t total_;
  double interval_s_;
  bool tty_;
  Timer timer_;
  double last_print_ = -1e9;
  bool open_line_ = false;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12.3s"
std::string format_count(double value);        // "1,234" / "12.3k" style grouping

}  // namespace aiscale::train
