// The machine profile beside a study: a directory holding machine-profile.toml (written by
// `aiscale bench machine --output`) shows its figures in the report.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/report/tables.h"

namespace aiscale::report {

// The file name looked for at the top of a study or run directory.
inline constexpr const char* kMachineProfileFile = "machine-profile.toml";

// {"file", "host", "date", "device", "figures": [{"figure", "value", "unit"}]} of the
// directory's machine profile, or null when it has none. A profile that is present but
// malformed fails with the loader's message. Adds the file to `files_read`.
nlohmann::json machine_profile_summary(const std::string& dir, std::vector<std::string>& files_read);

// One row per figure of every study's "machine_profile" (none: no rows).
Table machine_profile_table(const std::vector<nlohmann::json>& studies);

}  // namespace aiscale::report
