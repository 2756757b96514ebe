#include "aiscale/cli/options.h"

#include <cmath>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"

namespace aiscale::cli {
namespace {

std::string range_words(double lo, double hi) {
  if (hi >= std::numeric_limits<double>::max() / 2)
    return fmt::format("a number of at least {}", validate::bound_text(lo));
  return fmt::format("a number between {} and {}", validate::bound_text(lo), validate::bound_text(hi));
}

}  // namespace

CLI::Validator number_in(double lo, double hi) {
  const std::string words = range_words(lo, hi);
  return CLI::Validator(
      [lo, hi, words](std::string& text) -> std::string {
        try {
          validate::parse_real(text, lo, hi, "value");
        } catch (const Error&) {
          return fmt::format("'{}' is not allowed: give {} (NaN and infinity are refused)", text,
                             words);
        }
        return {};
      },
      hi >= std::numeric_limits<double>::max() / 2 ? fmt::format(">= {}", validate::bound_text(lo))
                                                   : fmt::format("{}..{}", validate::bound_text(lo),
                                                                 validate::bound_text(hi)),
      "NUMBER_IN");
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        try {
          v = validate::parse_real(text, -std::numeric_limits<double>::max(),
                                   std::numeric_limits<double>::max(), "value");
        } catch (const Error&) {
          return fmt::format("'{}' is not allowed: give a finite number above 0", text);
        }
        if (!(v > 0)) return fmt::format("'{}' is not allowed: give a finite number above 0", text);
        return {};
      },
      "> 0", "POSITIVE_NUMBER");
}

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string words =
      hi == std::numeric_limits<int64_t>::max()
          ? fmt::format("a whole number of at least {}", validate::bound_text(lo))
          : fmt::format("a whole number between {} and {}", validate::bound_text(lo),
                        validate::bound_text(hi));
  return CLI::Validator(
      [lo, hi, words](std::string& text) -> std::string {
        // Digits that do not fit 64 bits are a number out of range, not "not a number".
        switch (validate::classify_int(text, lo, hi)) {
          case validate::IntText::ok: return {};
          case validate::IntText::not_integer:
            return fmt::format("'{}' is not a whole number: give {}", text, words);
          case validate::IntText::too_small: return fmt::format("'{}' is too small: give {}", text, words);
          case validate::IntText::too_large: return fmt::format("'{}' is too large: give {}", text, words);
          case validate::IntText::beyond_64_bits:
            return fmt::format("'{}' is out of range: give a whole number between {} and {}", text,
                               validate::bound_text(lo), validate::upper_bound_text(hi));
        }
        return {};
      },
      hi == std::numeric_limits<int64_t>::max()
          ? fmt::format(">= {}", validate::bound_text(lo))
          : fmt::format("{}..{}", validate::bound_text(lo), validate::bound_text(hi)),
      "INTEGER_IN");
}

CLI::Validator thread_count() { return integer_in(0, validate::kMaxThreads); }

}  // namespace aiscale::cli
