#include "aiscale/orchestrate/script_text.h"

#include <cctype>

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::orchestrate {
namespace {

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }

const char* control_name(unsigned char c) {
  switch (c) {
    case '\n': return "a newline";
    case '\r': return "a carriage return";
    case '\t': return "a tab";
    case '\0': return "a NUL byte";
    default: return "a control character";
  }
}

}  // namespace

std::string printable(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (is_control(c)) out += fmt::format("\\x{:02X}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

void check_script_text(const std::string& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (is_control(c))
      fail("{} '{}' holds {} (character {}): in the script it would start a line of its own, "
           "which the job runs as a command; give it on one line without control characters",
           what, printable(v), control_name(c), i + 1);
  }
}

void check_sbatch_value(const std::string& v, const std::string& what) {
  check_script_text(v, what);
  const size_t bad = v.find_first_of(" \"'\\#");
  if (bad != std::string::npos)
    fail("{} '{}' holds '{}' (character {}): an #SBATCH line's value ends at the first blank, and "
         "quotes, backslashes and '#' change how sbatch reads it; choose a value without them",
         what, v, v[bad], bad + 1);
}

void check_env_name(const std::string& name, const std::string& what) {
  const bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                  name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
                      std::string::npos;
  if (!ok)
    fail("{}: '{}' is not an environment variable name: use letters, digits and '_' (not a digit "
         "first), e.g. NCCL_DEBUG=INFO", what, printable(name));
}

void check_word(const std::string& v, const std::string& what) {
  const bool ok = !v.empty() &&
                  v.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
                      std::string::npos;
  if (!ok)
    fail("{} '{}' must be one word of letters, digits, '.', '_' and '-' (e.g. pmix, pmi2, "
         "cray_shasta)", what, printable(v));
}

}  // namespace aiscale::orchestrate
