#include "aiscale/core/log.h"

#include <mutex>

namespace aiscale::log {
namespace {
struct State {
  int rank = 0, world = 1;
  Level level = Level::info;
  std::mutex mutex;
};
State& state() {
  static State s;
  return s;
}
}  // namespace

void set_rank(int rank, int world) {
  state().rank = rank;
  state().world = world;
}
int world() { return state().world; }
void set_level(Level level) { state().level = level; }
bool enabled(Level level) { return level >= state().level; }

void write(Level level, const std::string& message) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const char* tag = level == Level::error ? "error: " : level == Level::warn ? "warning: " : "";
  if (s.world > 1)
    fmt::print(stderr, "[rank {}] {}{}\n", s.rank, tag, message);
  else
    fmt::print(stderr, "{}{}\n", tag, message);
  std::fflush(stderr);
}
}  // namespace aiscale::log
