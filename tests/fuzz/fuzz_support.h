// What every fuzz target shares: the rule that aiscale::Error (a user's mistake, reported
// with a message) is an expected outcome while anything else is a bug, a scratch folder
// for parsers that read files, and the split of one input into several files.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/error.h"

namespace aiscale::fuzz {

// The message of the user error the last input ended with ("" when it was accepted): the
// replay test checks that the seeds are accepted, so that they reach past the first check.
inline std::string& last_user_error() {
  static thread_local std::string message;
  return message;
}

// Runs `parse`; a user error is a valid outcome, so it returns normally. Any other exception
// leaves (libFuzzer and the replay test report it as a crash).
template <typename F>
int expect_user_errors(F&& parse) {
  last_user_error().clear();
  try {
    parse();
  } catch (const Error& e) {
    last_user_error() = e.what();
  }
  return 0;
}

// A broken invariant that the input did not trip by being wrong (a value accepted once
// but refused when written back, say): reported as a crash with its reason.
[[noreturn]] inline void invariant_broken(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// One folder per process, removed at exit, for parsers that take paths.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path path;
    Scratch() {
      std::string pattern = (std::filesystem::temp_directory_path() / "aiscale-fuzz-XXXXXX").string();
      if (!mkdtemp(pattern.data())) invariant_broken("cannot create a scratch folder in TMPDIR");
      path = pattern;
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) invariant_broken("cannot write " + path.string());
}

// The parts of an input that holds several files, separated by a line "--8<--": at most
// `parts` pieces (the last one keeps any further separators); missing pieces are empty.
inline std::vector<std::string> split_parts(std::string_view data, size_t parts) {
  static constexpr std::string_view kSeparator = "\n--8<--\n";
  std::vector<std::string> out;
  while (out.size() + 1 < parts) {
    const size_t at = data.find(kSeparator);
    if (at == std::string_view::npos) break;
    out.emplace_back(data.substr(0, at));
    data.remove_prefix(at + kSeparator.size());
  }
  out.emplace_back(data);
  out.resize(parts);
  return out;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace aiscale::fuzz
