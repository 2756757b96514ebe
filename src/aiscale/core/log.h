// The logger: the only process-wide state. Messages go to stderr with a rank prefix
// when more than one rank runs.
#pragma once
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace aiscale::log {

enum class Level { debug, info, warn, error };
void set_rank(int rank, int world);
int world();  // as set by set_rank (1 until then)
void set_level(Level level);
bool enabled(Level level);
void write(Level level, const std::string& message);

template <typename... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::info)) write(Level::info, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::warn)) write(Level::warn, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void error(fmt::format_string<A...> f, A&&... a) {
  write(Level::error, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace aiscale::log
