#include "aiscale/core/validate.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::validate {
namespace {

std::string with_fix(std::string_view fix, const std::string& fallback) {
  return fix.empty() ? fallback : std::string(fix);
}

// Powers of two read better as 2^k once they are long.
std::optional<int> power_of_two(double v) {
  if (v < 65536 || v != std::floor(v)) return std::nullopt;
  int e = 0;
  const double m = std::frexp(v, &e);
  if (m == 0.5) return e - 1;
  return std::nullopt;
}

}  // namespace

std::string bound_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (v >= std::numeric_limits<double>::max() / 2) return "any";
  if (v <= -std::numeric_limits<double>::max() / 2) return "any";
  if (auto e = power_of_two(std::abs(v))) return fmt::format("{}2^{}", v < 0 ? "-" : "", *e);
  if (std::abs(v) >= 1e7 && v == std::floor(v)) return fmt::format("{:.3g}", v);
  return fmt::format("{}", v);
}

std::string bound_text(int64_t v) {
  if (v == std::numeric_limits<int64_t>::max() || v == std::numeric_limits<int64_t>::min())
    return "any";
  if (auto e = power_of_two(static_cast<double>(v < 0 ? -v : v)))
    return fmt::format("{}2^{}", v < 0 ? "-" : "", *e);
  return std::to_string(v);
}

std::string upper_bound_text(int64_t v) {
  return v == std::numeric_limits<int64_t>::max() ? std::to_string(v) : bound_text(v);
}

double finite(double v, std::string_view source, std::string_view fix) {
  if (!std::isfinite(v))
    fail("{} = {} is not a finite number: {}", source, v,
         with_fix(fix, "give an ordinary number (NaN and infinity are not allowed)"));
  return v;
}

namespace {

template <typename T>
T within(T v, T lo, T hi, std::string_view source, std::string_view fix) {
  if (v < lo)
    fail("{} = {} is too small: it must be at least {}{}{}", source, v, bound_text(lo),
         fix.empty() ? "" : "; ", fix);
  if (v > hi)
    fail("{} = {} is too large: it must be at most {}{}{}", source, v, bound_text(hi),
         fix.empty() ? "" : "; ", fix);
  return v;
}

}  // namespace

double in_range(double v, double lo, double hi, std::string_view source, std::string_view fix) {
  finite(v, source, fix);
  return within(v, lo, hi, source, fix);
}

int64_t in_range(int64_t v, int64_t lo, int64_t hi, std::string_view source, std::string_view fix) {
  return within(v, lo, hi, source, fix);
}

int64_t thread_count(int64_t v, std::string_view source) {
  return in_range(v, int64_t{0}, kMaxThreads, source,
                  "give the number of CPU threads to use, or 0 for all cores");
}

uint64_t buffer_bytes(uint64_t count, uint64_t element_bytes, std::string_view source) {
  if (element_bytes != 0 && count > kMaxBufferBytes / element_bytes)
    fail("{} asks for {} elements of {} bytes, more than the {} bytes aiscale allocates for one "
         "buffer: the value is corrupt or far too large", source, count, element_bytes,
         bound_text(static_cast<double>(kMaxBufferBytes)));
  return count * element_bytes;
}

int64_t checked_product(int64_t a, int64_t b, std::string_view source) {
  if (a < 0 || b < 0) fail("{}: negative size ({} x {})", source, a, b);
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    fail("{}: {} x {} overflows a 64-bit count: a value is far too large", source, a, b);
  return out;
}

bool looks_integer(std::string_view t) {
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  if (i == t.size()) return false;
  bool digit_before = false;
  for (; i < t.size(); ++i) {
    if (t[i] >= '0' && t[i] <= '9') {
      digit_before = true;
    } else if (t[i] == '_' && digit_before && i + 1 < t.size() && t[i + 1] >= '0' && t[i + 1] <= '9') {
      digit_before = false;
    } else {
      return false;
    }
  }
  return digit_before;
}

namespace {

// from_chars of the whole text (a leading '+' allowed): the value and the error code, or
// invalid_argument when text is left over.
std::pair<int64_t, std::errc> whole_int(std::string_view text) {
  int64_t v = 0;
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty()) return {0, std::errc::invalid_argument};
  const char* end = digits.data() + digits.size();
  auto [p, ec] = std::from_chars(digits.data(), end, v);
  if (ec == std::errc::result_out_of_range) return {0, looks_integer(text) ? ec : std::errc::invalid_argument};
  if (ec != std::errc() || p != end) return {0, std::errc::invalid_argument};
  return {v, std::errc()};
}

}  // namespace

IntText classify_int(std::string_view text, int64_t lo, int64_t hi) {
  const auto [v, ec] = whole_int(text);
  if (ec == std::errc::invalid_argument) return IntText::not_integer;
  if (ec == std::errc::result_out_of_range) return IntText::beyond_64_bits;
  return v < lo ? IntText::too_small : v > hi ? IntText::too_large : IntText::ok;
}

std::string out_of_range_text(std::string_view source, std::string_view text, int64_t lo, int64_t hi) {
  return fmt::format("{} = {} is out of range: it must be a whole number between {} and {}", source,
                     text, bound_text(lo), upper_bound_text(hi));
}

int64_t parse_int(std::string_view text, int64_t lo, int64_t hi, std::string_view source) {
  const auto [v, ec] = whole_int(text);
  if (ec == std::errc::invalid_argument)
    fail("{} = '{}' is not an integer: give a whole number between {} and {}", source, text,
         bound_text(lo), bound_text(hi));
  if (ec == std::errc::result_out_of_range)
    fail("{} = '{}' is out of range: it must be a whole number between {} and {}", source, text,
         bound_text(lo), upper_bound_text(hi));
  return in_range(v, lo, hi, source);
}

double parse_real(std::string_view text, double lo, double hi, std::string_view source) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    fail("{} = '{}' is not a number", source, text);
  if (errno == ERANGE && std::isinf(v))
    fail("{} = '{}' is too large to be a number aiscale can use", source, text);
  return in_range(v, lo, hi, source);
}

std::optional<int64_t> env_int(const char* name, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return parse_int(v, lo, hi, fmt::format("environment variable {}", name));
}

void omp_num_threads_env() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return;
  std::string_view text(v);
  text = text.substr(0, text.find(','));
  parse_int(text, 1, kMaxThreads, "environment variable OMP_NUM_THREADS");
}

void regular_file(const std::string& path, std::string_view what) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    fail("{} '{}' cannot be read: {}; check the path", what, path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{} '{}' is a directory, not a file: give the file's path", what, path);
  if (!S_ISREG(st.st_mode))
    fail("{} '{}' is not a regular file (a FIFO, device or socket): aiscale reads its inputs "
         "from ordinary files; copy the data into a file first", what, path);
}

void directory(const std::string& path, std::string_view what) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    fail("{} '{}' cannot be read: {}; check the path", what, path, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail("{} '{}' is not a directory", what, path);
}

}  // namespace aiscale::validate
