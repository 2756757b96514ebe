// The train config: TOML text through the schema (train/config.h), then written back
// (to_toml) and read again, which must give the same config. Lines after a "--8<--" line
// are --set overrides, one per line.
#pragma once
#include <sstream>

#include "../fuzz_support.h"
#include "aiscale/train/config.h"

namespace aiscale::fuzz {

inline int fuzz_train_config(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split_parts(as_text(data, size), 2);
  std::vector<std::string> overrides;
  std::istringstream lines(parts[1]);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) overrides.push_back(line);
  return expect_user_errors([&] {
    const train::TrainConfig c = train::parse_train_config(parts[0], "fuzz.toml", overrides);
    const std::string written = train::to_toml(c);
    train::TrainConfig again;
    try {
      again = train::parse_train_config(written, "fuzz-written.toml", {});
    } catch (const Error& e) {
      invariant_broken(std::string("an accepted config is refused once written back: ") + e.what() +
                       "\n" + written);
    }
    if (train::to_toml(again) != written)
      invariant_broken("a config changes when written back and read again:\n" + written +
                       "\n---\n" + train::to_toml(again));
  });
}

}  // namespace aiscale::fuzz
