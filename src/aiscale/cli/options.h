// Option checks shared by the subcommands: numeric ranges that refuse NaN and infinities
// and print their bounds as a person writes them (CLI11's own NonNegativeNumber prints
// the largest double in full, 309 digits, and lets NaN through).
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

namespace aiscale::cli {

// A finite number in [lo, hi]; hi = max double means "no upper bound".
CLI::Validator number_in(double lo, double hi = std::numeric_limits<double>::max());
// A finite number > 0.
CLI::Validator positive_number();
// A whole number in [lo, hi].
CLI::Validator integer_in(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());
// A CPU thread count: 0 (all cores) up to validate::kMaxThreads.
CLI::Validator thread_count();

}  // namespace aiscale::cli
