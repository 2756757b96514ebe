#include "aiscale/cli/help_text.h"

#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/split.h"

namespace aiscale::cli {

namespace {

using Key = std::tuple<std::string, std::string, std::string>;  // file, section, entry

struct HelpIndex {
  std::map<Key, std::string> entries;
  std::set<Key> used;
  std::mutex mutex;
};

void rtrim(std::string& s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
}

// The text of an entry from its lines: see help_text.h.
std::string entry_text(const std::vector<std::string>& lines) {
  std::string text;
  bool joinable = false;  // the last line was paragraph text, which the next one continues
  for (const std::string& line : lines) {
    if (line.empty()) {
      joinable = false;
      continue;
    }
    const bool as_is = line.rfind("  ", 0) == 0;
    if (joinable && !as_is) {
      text += ' ' + line;
      continue;
    }
    if (!text.empty()) text += '\n';
    text += line;
    joinable = !as_is;
  }
  return text;
}

void parse_file(HelpIndex& index, const std::string& file, const std::string& text) {
  std::istringstream in(text);
  std::string line, section, entry;
  std::vector<std::string> lines;
  bool open = false;
  auto close = [&] {
    if (open) index.entries[{file, section, entry}] = entry_text(lines);
    lines.clear();
  };
  while (std::getline(in, line)) {
    rtrim(line);
    if (line.rfind("# ", 0) == 0) {
      close();
      section = line.substr(2), entry.clear(), open = true;
    } else if (line.rfind("## ", 0) == 0) {
      if (section.empty()) fail("internal: cli/help/{}.md: an entry before the first section", file);
      close();
      entry = line.substr(3), open = true;
    } else if (open) {
      lines.push_back(line);
    }
  }
  close();
  // A section without a description (a group of shared options) holds no entry "".
  for (auto it = index.entries.begin(); it != index.entries.end();)
    it = std::get<2>(it->first).empty() && it->second.empty() ? index.entries.erase(it) : std::next(it);
}

HelpIndex& help_index() {
  static HelpIndex* index = [] {
    auto* x = new HelpIndex;
    for (size_t i = 0; i < kEmbeddedHelpFileCount; ++i)
      parse_file(*x, kEmbeddedHelpFiles[i].name, kEmbeddedHelpFiles[i].text);
    return x;
  }();
  return *index;
}

}  // namespace

HelpSection::HelpSection(std::string_view file, std::string_view section)
    : file_(file), section_(section) {}

std::string HelpSection::about() const { return entry(""); }

std::string HelpSection::footer() const { return entry("footer"); }

std::string HelpSection::of(std::string_view name) const { return entry(name); }

std::string HelpSection::entry_of(std::string_view names) {
  std::string first;
  for (std::string_view name : split(names, ',')) {
    if (!name.empty() && name.front() == '!') name.remove_prefix(1);
    if (name.rfind("--", 0) == 0) return std::string(name);
    if (first.empty()) first = name;
  }
  return first;
}

std::string HelpSection::entry(std::string_view name) const {
  HelpIndex& index = help_index();
  const Key key{file_, section_, std::string(name)};
  std::lock_guard lock(index.mutex);
  const auto it = index.entries.find(key);
  if (it == index.entries.end())
    fail("internal: src/aiscale/cli/help/{}.md has no {} in section '{}'", file_,
         name.empty() ? std::string("description") : fmt::format("entry '## {}'", name), section_);
  index.used.insert(key);
  return it->second;
}

std::vector<std::string> unused_help_entries() {
  HelpIndex& index = help_index();
  std::lock_guard lock(index.mutex);
  std::vector<std::string> out;
  for (const auto& [key, text] : index.entries)
    if (!index.used.count(key))
      out.push_back(fmt::format("{}.md: {}: {}", std::get<0>(key), std::get<1>(key), std::get<2>(key)));
  return out;
}

}  // namespace aiscale::cli
