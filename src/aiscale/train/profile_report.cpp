#include "aiscale/train/profile_report.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/profile/op_table.h"
#include "aiscale/profile/op_table_ranks.h"
#include "aiscale/train/trace_writer.h"

namespace aiscale::train {
namespace fs = std::filesystem;
using profile::OpProfiler;
using profile::op_table_from_json;
using profile::OpTable;
using profile::RankSpread;

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
  // Every rank's table, gathered on rank 0 as JSON text.
  const std::vector<std::string> texts = gather_text(comm, op_table_json(make_op_table(p)).dump());
  if (comm.rank() != 0) return f;
  std::vector<OpTable> tables;
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& text : texts) {
    nlohmann::json j = nlohmann::json::parse(text);
    tables.push_back(op_table_from_json(j));
    ranks.push_back(std::move(j));
  }
  const RankSpread spread = rank_spread(tables);
  // The top level is rank 0's table (as with one rank); beside it every rank's and the
  // spread over the ranks.
  nlohmann::json out = ranks.at(0);
  out["world_size"] = comm.world();
  out["ranks"] = std::move(ranks);
  out["across_ranks"] = rank_spread_json(spread);
  atomic_write_file(f.table_json, out.dump(2) + "\n");
  const std::string md = op_table_markdown(tables[0]);
  const std::string across = tables.size() > 1 ? rank_spread_markdown(spread) : std::string();
  std::string file = "# Op table\n\n" + md;
  if (!across.empty()) {
    file += "\n## Across ranks\n\n" + across;
    for (size_t r = 1; r < tables.size(); ++r)
      file += fmt::format("\n## Rank {}\n\n", tables[r].rank) + op_table_markdown(tables[r]);
  }
  atomic_write_file(f.table_markdown, file);
  std::fprintf(stderr, "\n%s%s%s\ntrace: %s (open it in https://ui.perfetto.dev)\nop table: %s%s\n\n",
               md.c_str(), across.empty() ? "" : "\n", across.c_str(), f.trace.c_str(),
               f.table_markdown.c_str(), tables.size() > 1 ? " (every rank's)" : "");
  std::fflush(stderr);
  return f;
}

}  // namespace aiscale::train
