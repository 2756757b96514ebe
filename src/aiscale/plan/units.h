// Number formatting shared by the planner's formulas, tables and reports.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace aiscale::plan {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;

std::string with_commas(int64_t n);          // 124439808 -> "124,439,808"
std::string sci(double x, int digits = 3);   // 1.028e+20 -> "1.028e20"
std::string gib(double bytes, int digits = 1);  // "25.1 GiB"
std::string duration(double seconds);        // "3.2 ms", "1.4 s", "5.0 h", "12.3 days"
std::string compact(double x);
// "90s", "45min", "36h", "3d" / "3days", "2w" (also "1.5h"; a bare number is seconds):
// seconds. Throws Error naming `what` for anything else or a value not above zero.
double parse_duration(std::string_view text, std::string_view what);               // 1.2e6 -> "1.2M", 3400 -> "3.4k"

}  // namespace aiscale::plan
