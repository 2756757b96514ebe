// Checks shared by the profile tests: the Chrome trace-event format as Perfetto reads it.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::testsupport {

// "" when `t` is a well-formed trace, else the first problem found: an object with a
// "traceEvents" array; every event has name (string), ph (one of X B E M), ts (number),
// pid and tid (integers); "X" events have dur >= 0; "M" events name a process or thread
// in args.name (or sort it); "B"/"E" pairs balance per (pid, tid), E closing the newest B.
inline std::string check_trace(const nlohmann::json& t) {
  if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array())
    return "no traceEvents array";
  std::map<std::pair<int64_t, int64_t>, std::vector<std::string>> open;
  size_t i = 0;
  for (const auto& e : t["traceEvents"]) {
    const std::string at = "event " + std::to_string(i++) + " " + e.dump() + ": ";
    for (const char* k : {"name", "ph", "ts", "pid", "tid"})
      if (!e.contains(k)) return at + "lacks " + k;
    if (!e["name"].is_string() || !e["ph"].is_string()) return at + "name/ph not strings";
    if (!e["ts"].is_number()) return at + "ts not a number";
    if (!e["pid"].is_number_integer() || !e["tid"].is_number_integer()) return at + "pid/tid not integers";
    const std::string ph = e["ph"];
    const auto key = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0)
        return at + "X without dur >= 0";
    } else if (ph == "B") {
      open[key].push_back(e["name"]);
    } else if (ph == "E") {
      auto& stack = open[key];
      if (stack.empty()) return at + "E without B";
      if (stack.back() != e["name"].get<std::string>()) return at + "E closes another B";
      stack.pop_back();
    } else if (ph == "M") {
      const std::string n = e["name"];
      if (n == "process_name" || n == "thread_name") {
        if (!e.contains("args") || !e["args"].contains("name") || !e["args"]["name"].is_string())
          return at + "metadata without args.name";
      } else if (n != "process_sort_index" && n != "thread_sort_index") {
        return at + "unknown metadata event";
      }
    } else {
      return at + "unexpected ph " + ph;
    }
  }
  for (const auto& [key, stack] : open)
    if (!stack.empty()) return "unclosed B '" + stack.back() + "' on tid " + std::to_string(key.second);
  return "";
}

}  // namespace aiscale::testsupport
