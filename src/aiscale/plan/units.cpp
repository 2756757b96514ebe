#include "aiscale/plan/units.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::plan {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string sci(double x, int digits) {
  if (x == 0) return "0";
  int exp = static_cast<int>(std::floor(std::log10(std::fabs(x))));
  double mant = x / std::pow(10.0, exp);
  // Rounding can carry (9.9996 -> 10.000): renormalise.
  if (std::fabs(std::stod(fmt::format("{:.{}f}", mant, digits))) >= 10.0) {
    mant /= 10.0;
    ++exp;
  }
  return fmt::format("{:.{}f}e{}", mant, digits, exp);
}

std::string gib(double bytes, int digits) { return fmt::format("{:.{}f} GiB", bytes / kGiB, digits); }

std::string duration(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 1e-3) return fmt::format("{:.0f} µs", s * 1e6);
  if (s < 1.0) return fmt::format("{:.1f} ms", s * 1e3);
  if (s < 120.0) return fmt::format("{:.2f} s", s);
  if (s < 7200.0) return fmt::format("{:.1f} min", s / 60.0);
  if (s < 2 * 86400.0) return fmt::format("{:.1f} h", s / 3600.0);
  return fmt::format("{:.1f} days", s / 86400.0);
}

std::string compact(double x) {
  double a = std::fabs(x);
  if (a >= 1e12) return fmt::format("{:.1f}T", x / 1e12);
  if (a >= 1e9) return fmt::format("{:.1f}G", x / 1e9);
  if (a >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}k", x / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", x);
  return fmt::format("{:.3g}", x);
}

}  // namespace aiscale::plan

namespace aiscale::plan {

double parse_duration(std::string_view text, std::string_view what) {
  const std::string t(text);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = used > 0 ? t.substr(used) : std::string();
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "min" || unit == "m") scale = 60;
  else if (unit == "h") scale = 3600;
  else if (unit == "d" || unit == "day" || unit == "days") scale = 86400;
  else if (unit == "w" || unit == "weeks") scale = 7 * 86400;
  if (used == 0 || scale == 0 || !(value > 0) || !std::isfinite(value))
    fail("{} = '{}' is not a duration: write a positive number with s, min, h, d or w (e.g. 36h, "
         "3d)", what, text);
  return value * scale;
}

}  // namespace aiscale::plan
