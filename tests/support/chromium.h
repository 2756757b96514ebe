// A page opened in headless Chromium (Debian's `chromium`) for the HTML report's tests:
// the DOM after its scripts ran and the report's status element (charts drawn, errors).
// Without Chromium the calling test fails and says how to install it (never skips).
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "run_support.h"

namespace aiscale::testsupport {

// $AISCALE_CHROMIUM, else `chromium` on PATH; "" when there is none.
inline std::string chromium_binary() {
  if (const char* env = std::getenv("AISCALE_CHROMIUM"); env != nullptr && *env != '\0') return env;
  auto r = run_command("command -v chromium");
  if (r.exit_code != 0) return "";
  return r.output.substr(0, r.output.find('\n'));
}

struct BrowserView {
  std::string dom;                           // the DOM after the page ran
  std::map<std::string, std::string> status; // data-* of #aiscale-report-status, and "text"
  std::string log;                           // Chromium's own output
};

inline BrowserView open_in_chromium(const fs::path& html, const fs::path& work) {
  const std::string chromium = chromium_binary();
  BrowserView v;
  if (chromium.empty()) {
    ADD_FAILURE() << "chromium is not installed, so the HTML report cannot be checked: run "
                     "scripts/setup.sh (apt package chromium) or set AISCALE_CHROMIUM";
    return v;
  }
  const fs::path profile = work / "chromium-profile", dom = work / "dom.html", log = work / "chromium.log";
  fs::create_directories(profile);
  const std::string cmd =
      "timeout 90 " + chromium + " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir=" + profile.string() + " --virtual-time-budget=20000 --dump-dom 'file://" +
      fs::absolute(html).string() + "' > " + dom.string() + " 2> " + log.string();
  auto r = run_command(cmd);
  v.dom = read_bytes(dom);
  v.log = read_bytes(log);
  EXPECT_EQ(r.exit_code, 0) << "chromium failed: " << r.output << v.log;
  std::smatch m;
  if (!std::regex_search(v.dom, m, std::regex("<p id=\"aiscale-report-status\"([^>]*)>([^<]*)</p>"))) {
    ADD_FAILURE() << "no status element in the page Chromium ran; its log:\n" << v.log;
    return v;
  }
  const std::string attrs = m[1].str();
  v.status["text"] = m[2].str();
  std::regex attr("data-([a-z]+)=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(attrs.begin(), attrs.end(), attr); it != std::sregex_iterator(); ++it)
    v.status[(*it)[1].str()] = (*it)[2].str();
  return v;
}

// Whether the chart container `id` holds an <svg> or <canvas> in the DOM Chromium returned
// (read from the DOM itself, not from the page's own bookkeeping).
inline bool chart_drawn(const std::string& dom, const std::string& id) {
  const size_t start = dom.find("id=\"chart-" + id + "\"");
  if (start == std::string::npos) return false;
  const size_t end = dom.find("</figure>", start);
  const std::string inside = dom.substr(start, end - start);
  return inside.find("<svg") != std::string::npos || inside.find("<canvas") != std::string::npos;
}

}  // namespace aiscale::testsupport
