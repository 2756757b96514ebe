#include "aiscale/plan/time_limit.h"

#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::plan {
namespace {

[[noreturn]] void bad_time(const std::string& text, const std::string& what, const std::string& why) {
  fail("{} '{}' is not a Slurm time limit ({}): write MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
       "D-HH:MM:SS, e.g. 90 (minutes), 02:00:00 or 1-12:00:00", what, text, why);
}

// Splits "a:b:c" into numbers; every field must be digits only.
std::vector<long> fields(const std::string& part, const std::string& text, const std::string& what) {
  std::vector<long> out;
  size_t start = 0;
  while (true) {
    size_t colon = part.find(':', start);
    std::string f = part.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (f.empty() || f.size() > 6) bad_time(text, what, "an empty or overlong field");
    for (char c : f)
      if (!std::isdigit(static_cast<unsigned char>(c))) bad_time(text, what, "only digits, ':' and '-' are allowed");
    out.push_back(std::stol(f));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

}  // namespace

long parse_slurm_time(const std::string& text, const std::string& what) {
  if (text.empty()) bad_time(text, what, "it is empty");
  long total = 0;
  const size_t dash = text.find('-');
  if (dash != std::string::npos) {
    // D-HH, D-HH:MM, D-HH:MM:SS
    auto days = fields(text.substr(0, dash), text, what);
    auto rest = fields(text.substr(dash + 1), text, what);
    if (days.size() != 1 || rest.size() > 3) bad_time(text, what, "too many ':' fields");
    if (rest[0] >= 24) bad_time(text, what, "hours must be below 24 after the days");
    if (rest.size() > 1 && rest[1] >= 60) bad_time(text, what, "minutes must be below 60");
    if (rest.size() > 2 && rest[2] >= 60) bad_time(text, what, "seconds must be below 60");
    total = days[0] * 86400 + rest[0] * 3600 + (rest.size() > 1 ? rest[1] * 60 : 0) +
            (rest.size() > 2 ? rest[2] : 0);
  } else {
    auto f = fields(text, text, what);
    if (f.size() > 3) bad_time(text, what, "too many ':' fields");
    if (f.size() == 1) {
      total = f[0] * 60;  // MM
    } else if (f.size() == 2) {
      if (f[1] >= 60) bad_time(text, what, "seconds must be below 60");
      total = f[0] * 60 + f[1];  // MM:SS
    } else {
      if (f[1] >= 60 || f[2] >= 60) bad_time(text, what, "minutes and seconds must be below 60");
      total = f[0] * 3600 + f[1] * 60 + f[2];  // HH:MM:SS
    }
  }
  if (total <= 0) bad_time(text, what, "the limit must be longer than zero");
  return total;
}

std::string format_slurm_time(long seconds) {
  const long d = seconds / 86400, h = seconds % 86400 / 3600, m = seconds % 3600 / 60, s = seconds % 60;
  if (d > 0) return fmt::format("{}-{:02}:{:02}:{:02}", d, h, m, s);
  return fmt::format("{:02}:{:02}:{:02}", h, m, s);
}

}  // namespace aiscale::plan
