// Slurm wall-time limits ("--time"): parsing and validation of the forms sbatch accepts,
// so that a mistyped limit is refused by aiscale with the forms listed, before sbatch. In
// plan/ because the systems catalogue checks its partitions' max_time with it, and
// orchestrate/ stands above plan/ (docs/design/layers.md).
#pragma once
#include <string>

namespace aiscale::plan {

// Seconds of a Slurm time limit in one of sbatch's forms:
//   MM   MM:SS   HH:MM:SS   D-HH   D-HH:MM   D-HH:MM:SS
// Minutes and seconds after the first field must be below 60, hours below 24 when days
// are given; the limit must be positive. Throws Error naming `what` (e.g. "--time") and
// the accepted forms.
long parse_slurm_time(const std::string& text, const std::string& what = "--time");

// "D-HH:MM:SS" (days omitted when 0: "HH:MM:SS").
std::string format_slurm_time(long seconds);

}  // namespace aiscale::plan
