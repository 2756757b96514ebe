// The subcommands' help prose (descriptions, footers and the longer option descriptions),
// kept as Markdown in src/aiscale/cli/help/<file>.md and built into the binary
// (cmake/embed_text_files.cmake). A file holds sections, `# <section>`: a subcommand (its
// description follows the heading) or a group of options that several subcommands share;
// a section's entries, `## <entry>`, are its options by their long name ("--output"),
// its positionals by name, and `footer`. Lines of a paragraph are joined by spaces; a blank
// line is a line break; a line indented by two spaces stands as it is (an example command).
// What stands before the first section (a comment) is not read.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "aiscale/report/embedded_text.h"

namespace aiscale::cli {

// One section of a help file. Asking for what the file does not hold is a mistake in the
// program and throws aiscale::Error naming the file, section and entry.
class HelpSection {
 public:
  HelpSection(std::string_view file, std::string_view section);

  // The subcommand's description: the text under the heading.
  std::string about() const;
  // The entry `## footer`.
  std::string footer() const;
  // An option's (or positional's) description: `## --name`.
  std::string of(std::string_view entry) const;

  // Adds to `app` the option (or flag) `names`, e.g. "--output,-o", described by the entry of
  // its first long name without a leading '!' ("!--no-check": `## --no-check`), or of its
  // first name where it has no long one (a positional).
  template <typename T>
  CLI::Option* option(CLI::App* app, const std::string& names, T& value) const {
    return app->add_option(names, value, of(entry_of(names)));
  }
  template <typename T>
  CLI::Option* flag(CLI::App* app, const std::string& names, T& value) const {
    return app->add_flag(names, value, of(entry_of(names)));
  }

 private:
  static std::string entry_of(std::string_view names);
  std::string entry(std::string_view name) const;
  std::string file_, section_;
};

// "file.md: section: entry" for every entry (descriptions included, as entry "") that no
// HelpSection has asked for since the program started; after the subcommands are added,
// each names an option that does not exist.
std::vector<std::string> unused_help_entries();

// The help files as built in.
extern const report::EmbeddedTextFile kEmbeddedHelpFiles[];
extern const size_t kEmbeddedHelpFileCount;

}  // namespace aiscale::cli
