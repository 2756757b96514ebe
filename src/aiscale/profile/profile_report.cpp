#include "aiscale/profile/profile_report.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/profile/op_table.h"
#include "aiscale/profile/trace_writer.h"

namespace aiscale::profile {
namespace fs = std::filesystem;

void check_profile_steps(int64_t steps, int64_t available, int64_t warmup, const std::string& raise) {
  if (steps < 1)
    fail("--profile {}: the number of steps to profile must be at least 1 (e.g. --profile 3); "
         "leave --profile out to profile nothing", steps);
  if (steps > available)
    fail("--profile {}: the run has only {} step(s) after its {} warm-up step(s); profile at "
         "most {} or raise {} to {}", steps, available, warmup, available, raise, warmup + steps);
}

void check_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  // The nearest folder that exists must let us create entries.
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (!p.empty() && fs::exists(p, ec) && !fs::is_directory(p, ec))
    fail("{} '{}': '{}' is a file, not a folder; choose another folder", what, dir, p.string());
  if (!p.empty() && ::access(p.c_str(), W_OK | X_OK) != 0)
    fail("{} '{}': cannot write in '{}' (permission denied); choose a folder you can write to",
         what, dir, p.string());
}

ProfileFiles write_profile(OpProfiler& p, parallel::Communicator& comm, const std::string& dir,
                           const std::string& stem) {
  p.resolve();
  ProfileFiles f;
  f.trace = (fs::path(dir) / (stem + "trace.json")).string();
  f.table_json = (fs::path(dir) / (stem + "op_table.json")).string();
  f.table_markdown = (fs::path(dir) / (stem + "op_table.md")).string();
  if (comm.rank() == 0) fs::create_directories(dir);
  write_trace(p, comm, f.trace);
  if (comm.rank() != 0) return f;
  const OpTable t = make_op_table(p);
  atomic_write_file(f.table_json, op_table_json(t).dump(2) + "\n");
  const std::string md = op_table_markdown(t);
  atomic_write_file(f.table_markdown, "# Op table\n\n" + md);
  std::fprintf(stderr, "\n%s\ntrace: %s (open it in https://ui.perfetto.dev)\nop table: %s\n\n",
               md.c_str(), f.trace.c_str(), f.table_markdown.c_str());
  std::fflush(stderr);
  return f;
}

}  // namespace aiscale::profile
