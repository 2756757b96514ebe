// Files that are never left half-written: write a temporary file next to the target,
// fsync it, rename it over the target, fsync the directory.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aiscale {

void atomic_write_file(const std::string& path, std::string_view content);
void fsync_directory(const std::string& dir);
std::string read_file(const std::string& path);  // throws Error naming the path
// Before long work whose result goes to `path`: fails naming `what` (the option, e.g.
// "--output") and the path unless a file can be written there — not a folder, its folder
// exists, a new file can be created in it (tried: a read-only mount is found too, not
// only permissions), and an existing file opens for writing. Nothing is left behind.
void check_output_file(const std::string& path, const std::string& what);
// An input named by a file or a folder: the file itself, or the folder's files (with
// `recursive` also those of its subfolders) whose extension is one of `extensions`,
// sorted; nullopt where `path` is neither a file nor a folder.
std::optional<std::vector<std::string>> files_or_folder(
    const std::string& path, std::initializer_list<std::string_view> extensions, bool recursive);
// Machine description for benchmark records: "hostname", CPU model name.
std::string host_name();
std::string cpu_model_name();
// UTC time as ISO 8601 ("2026-11-26T01:30:00Z") and compact ("20261126-013000").
std::string utc_iso8601();
std::string utc_compact();

}  // namespace aiscale
