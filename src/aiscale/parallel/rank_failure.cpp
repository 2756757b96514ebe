#include "aiscale/parallel/rank_failure.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/env.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/launch_env.h"

namespace aiscale::parallel {
namespace fs = std::filesystem;

void record_failure(int rank, const ExceptionText& failure, const std::string& run_dir,
                    bool printed) {
  try {
    const std::string dir = env::get("AISCALE_FAILURE_DIR");
    if (!dir.empty() && fs::is_directory(dir)) {
      nlohmann::json j = {{"rank", rank},
                          {"host", host_name()},
                          {"exit_code", failure.exit_code},
                          {"message", failure.message},
                          {"printed", printed},
                          {"time", utc_iso8601()}};
      atomic_write_file((fs::path(dir) / fmt::format("rank-{}.json", rank)).string(),
                        j.dump() + "\n");
    }
  } catch (...) {
    // A report of a failure must not fail in turn: the message was printed (or rank 0's was).
  }
  try {
    if (!run_dir.empty() && fs::is_directory(run_dir)) {
      // One line per failed rank, appended (ranks write whole lines; O_APPEND keeps them apart).
      std::ofstream out((fs::path(run_dir) / "errors.log").string(), std::ios::app);
      out << fmt::format("{} rank {} ({}): error: {}\n", utc_iso8601(), rank, host_name(),
                         failure.message);
    }
  } catch (...) {
  }
}

namespace {
bool already_reported(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const ReportedFailure&) {
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace

void report_rank_failure(RankContext& context) {
  // Before any communicator there is nothing to keep alive: main() reports it, once for an
  // error every rank finds alike.
  if (!context.comm) throw;
  const std::exception_ptr e = std::current_exception();
  const ExceptionText failure = describe_exception(e);
  const int rank = context.comm->rank();
  const int world = context.comm->world();
  if (!already_reported(e)) {
    log::error("{}", failure.message);
    record_failure(rank, failure, context.run_dir, /*printed=*/true);
  }
  if (world > 1) {
    log::info("ending the job's other {} rank(s): this rank cannot continue", world - 1);
    std::fflush(stderr);
    // Peers wait in the next collective for a rank that will not come: end them all.
    context.comm->abort(failure.exit_code);
    std::_Exit(failure.exit_code);  // a communicator whose abort returned
  }
  throw ReportedFailure(failure.exit_code);
}

int report_failure_at_exit() {
  const std::exception_ptr e = std::current_exception();
  const ExceptionText failure = describe_exception(e);
  try {
    std::rethrow_exception(e);
  } catch (const ReportedFailure& r) {
    return r.exit_code();
  } catch (const AlikeOnEveryRank&) {
    LaunchEnv launched;
    try {
      launched = launch_env();
    } catch (const Error&) {
      // a malformed launcher environment: report as a single process
    }
    if (launched.world > 1 && launched.rank != 0) {
      // Rank 0 says it; this rank records it and gives rank 0 a moment to print before the
      // launcher, seeing this rank exit, ends the job.
      record_failure(launched.rank, failure, "", /*printed=*/false);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return failure.exit_code;
    }
    log::error("{}", failure.message);
    record_failure(launched.rank, failure, "", /*printed=*/true);
    return failure.exit_code;
  } catch (...) {
  }
  int rank = 0;
  try {
    const LaunchEnv launched = launch_env();
    // Before a communicator the logger does not know the rank yet: say it.
    if (launched.world > 1 && log::world() == 1) log::set_rank(launched.rank, launched.world);
    rank = launched.rank;
  } catch (const Error&) {
  }
  log::error("{}", failure.message);
  record_failure(rank, failure, "", /*printed=*/true);
  return failure.exit_code;
}

}  // namespace aiscale::parallel
