#include "aiscale/sweep/point.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/validate.h"
#include "aiscale/launch/local.h"
#include "aiscale/sweep/point_processes.h"
#include "aiscale/sweep/stop_signals.h"
#include "aiscale/sweep/study.h"

namespace aiscale::sweep {
namespace fs = std::filesystem;

void write_point_command(const std::string& point_dir, const PointCommand& c) {
  nlohmann::json j = {{"ranks", c.ranks}, {"argv", c.argv}, {"threads_per_rank", c.threads_per_rank}};
  atomic_write_file((fs::path(point_dir) / "command.json").string(), j.dump(2) + "\n");
}

PointCommand read_point_command(const std::string& point_dir) {
  const std::string path = (fs::path(point_dir) / "command.json").string();
  if (!fs::exists(path)) fail("'{}' is missing: is '{}' a point folder of a study?", path, point_dir);
  try {
    auto j = nlohmann::json::parse(read_file(path));
    PointCommand c;
    const int64_t ranks = j.at("ranks").get<int64_t>();
    if (ranks < 1 || ranks > kMaxStudyRanks)
      fail("'{}': ranks = {} is out of range: it must be between 1 and {}", path, ranks,
           validate::bound_text(kMaxStudyRanks));
    c.ranks = static_cast<int>(ranks);
    c.argv = j.at("argv").get<std::vector<std::string>>();
    c.threads_per_rank = j.value("threads_per_rank", 0);
    if (c.ranks < 1 || c.argv.empty()) fail("'{}': ranks must be positive and argv non-empty", path);
    return c;
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not a valid point command ({}): write it again with `aiscale scale`", path, e.what());
  }
}

std::string file_tail(const std::string& path, int lines) {
  std::ifstream in(path);
  if (!in) return "";
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > size_t(lines) ? all.size() - lines : 0; i < all.size(); ++i)
    out += all[i] + (i + 1 < all.size() ? "\n" : "");
  return out;
}

namespace {

bool has_results(const fs::path& run) {
  if (!fs::exists(run / "steps.jsonl")) return false;
  if (fs::exists(run / "summary.json")) {
    try {
      auto j = nlohmann::json::parse(read_file((run / "summary.json").string()));
      return j.value("status", "") == "finished";
    } catch (const nlohmann::json::exception&) {
      return false;
    }
  }
  return fs::exists(run / "bench.jsonl") && fs::file_size(run / "bench.jsonl") > 0;
}

}  // namespace

PointStatus point_status(const std::string& point_dir) {
  const fs::path dir(point_dir);
  if (fs::exists(dir / "interrupted")) {
    std::string text = read_file((dir / "interrupted").string());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return {"interrupted", fmt::format("interrupted by {}: run the study again to run it", text)};
  }
  const bool results = has_results(dir / "run");
  const fs::path code_file = dir / "exit_code";
  if (fs::exists(code_file)) {
    std::string text = read_file(code_file.string());
    int code = -1;
    try {
      code = std::stoi(text);
    } catch (const std::exception&) {
      return {"failed", fmt::format("exit_code holds '{}', not a number", text)};
    }
    if (code == 0 && results) return {"finished", ""};
    const std::string tail = file_tail((dir / "log.txt").string(), 15);
    if (code == 0) return {"failed", "exited 0 but left no complete results in run/\n" + tail};
    return {"failed", fmt::format("exit code {}\n{}", code, tail)};
  }
  if (results) return {"finished", ""};  // e.g. collected from a job that wrote no exit_code
  if (fs::exists(dir / "log.txt")) return {"running", ""};
  return {"pending", ""};
}

void clear_point_outputs(const std::string& point_dir) {
  const fs::path dir(point_dir);
  std::error_code ec;
  for (const char* name : {"run", "log.txt", "exit_code", "interrupted"}) fs::remove_all(dir / name, ec);
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void append_note(const std::string& log, const std::string& line) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return;
  const std::string text = "aiscale scale: " + line + "\n";
  if (::write(fd, text.data(), text.size()) < 0) {}
  ::close(fd);
}

}  // namespace

PointRun run_point_local(const std::string& point_dir, const LocalExecutor& executor) {
  const PointCommand c = read_point_command(point_dir);
  launch::LocalLaunch l;
  l.ranks = c.ranks;
  l.threads_per_rank = c.threads_per_rank;
  l.mpirun = executor.mpirun;
  l.command = c.argv;
  const std::string self =
      executor.self_exe.empty() ? fs::read_symlink("/proc/self/exe").string() : executor.self_exe;
  std::vector<std::string> args = launch::local_launch_argv(l, self);
  const std::string marker = fs::absolute(point_dir).lexically_normal().string();
  const std::string log = (fs::path(point_dir) / "log.txt").string();
  // The environment with the point's marker.
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind(std::string(kPointEnv) + "=", 0) != 0) env_text.emplace_back(*e);
  env_text.push_back(std::string(kPointEnv) + "=" + marker);
  // A session of its own: the terminal's Ctrl-C does not reach the ranks past aiscale scale,
  // which passes it on and waits for them; a signal is handled once the child is known.
  const pid_t pid = start_logged_process(
      args, env_text, log, /*append=*/false,
      fmt::format("cannot run '{}' (install OpenMPI or pass --mpirun PATH)\n", args[0]),
      [](pid_t started) { StopSignals::set_point_process(started); });

  // Wait for mpirun; after a stop signal, poll so the grace period can end.
  int status = 0;
  int forwarded = 0;
  double deadline = 0;
  bool killed = false;
  for (;;) {
    // Checked before each wait too: a signal that came before the child was known (or
    // while this point was being prepared) finds no wait to interrupt.
    if (StopSignals::received() && !forwarded) {
      forwarded = StopSignals::received();
      deadline = now_s() + executor.stop_timeout_s;
      ::kill(-pid, forwarded);
      // mpirun's process group has it; the ranks have groups of their own.
      signal_processes(find_point_processes(marker), forwarded);
      append_note(log, fmt::format("{} received: passed on to the point's processes; they have "
                                   "{} s to end", stop_signal_name(forwarded),
                                   executor.stop_timeout_s));
    }
    if (forwarded && !killed && (StopSignals::count() > 1 || now_s() >= deadline)) {
      killed = true;
      append_note(log, "the point's processes did not end in time: killed (SIGKILL)");
      ::kill(-pid, SIGKILL);
      signal_processes(find_point_processes(marker), SIGKILL);
    }
    const pid_t r = ::waitpid(pid, &status, forwarded ? WNOHANG : 0);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      status = 0;
      break;
    }
    if (forwarded) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  StopSignals::set_point_process(0);
  // No process of this point may run beside the next one: ranks that outlive mpirun get
  // the stop signal (or SIGTERM), then SIGKILL when the time is up.
  const double left_s = forwarded ? std::max(0.0, deadline - now_s()) : executor.stop_timeout_s;
  const int leftover = end_point_processes(marker, forwarded ? (killed ? SIGKILL : 0) : SIGTERM, left_s);
  if (leftover > 0 && !forwarded)
    append_note(log, fmt::format("{} process(es) of the point were still running after mpirun "
                                 "ended: ended them", leftover));
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const int stop = StopSignals::received();
  if (stop) atomic_write_file((fs::path(point_dir) / "interrupted").string(),
                              std::string(stop_signal_name(stop)) + "\n");
  atomic_write_file((fs::path(point_dir) / "exit_code").string(), std::to_string(code) + "\n");
  return {code, stop};
}

}  // namespace aiscale::sweep
