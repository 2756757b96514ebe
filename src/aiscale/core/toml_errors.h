// TOML parse errors as aiscale reports them. toml++ refuses an integer that does not fit 64
// bits with "'...' is not representable in 64 bits", naming neither the key nor what range
// the value should be in; the message here says it is out of range, naming the file, the
// line, the key (read from the line and the table header above it) and the key's range.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

namespace aiscale {

using IntRange = std::optional<std::pair<int64_t, int64_t>>;

// For an integer beyond 64 bits: "run.toml:4: train.steps = 99999999999999999999 is out of
// range: it must be a whole number between 1 and 2^40", the range from `range_of(key)`, or
// the 64-bit range where it does not know the key. nullopt for any other parse error.
std::optional<std::string> toml_integer_out_of_range(
    const toml::parse_error& e, std::string_view text, std::string_view source,
    const std::function<IntRange(const std::string& key)>& range_of = {});

}  // namespace aiscale
