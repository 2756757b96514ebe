// Error type for user-facing failures: one message that names the input and the fix.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace aiscale {

// A mistake in what the user gave us (config, file, layout) or an unrecoverable
// runtime condition. The CLI prints what() and exits non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariant check (a bug in aiscale, not the user's input).
#define AISCALE_CHECK(cond, ...)                                                       \
  do {                                                                                 \
    if (!(cond))                                                                       \
      ::aiscale::fail("internal check failed at {}:{}: {} — {}", __FILE__, __LINE__, #cond, \
                      ::fmt::format(__VA_ARGS__));                                     \
  } while (0)

}  // namespace aiscale
