#include "aiscale/launch/local.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"

namespace aiscale::launch {

std::vector<std::string> local_launch_argv(const LocalLaunch& l, const std::string& self_exe) {
  if (l.ranks < 1) fail("launch: -n {} is invalid: give at least 1 rank", l.ranks);
  if (l.command.empty()) fail("launch: nothing to run: write the aiscale command after --, e.g. "
                              "aiscale launch -n 2 -- train --config configs/quickstart.toml");
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int threads = l.threads_per_rank > 0 ? l.threads_per_rank : std::max(1, cores / l.ranks);
  std::vector<std::string> argv = {l.mpirun, "-np", std::to_string(l.ranks)};
  // More ranks than cores is allowed (tests on small machines); ranks are not pinned so
  // each can use its OpenMP threads.
  argv.insert(argv.end(), {"--oversubscribe", "--bind-to", "none"});
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", threads),
                           "-x", fmt::format("OPENBLAS_NUM_THREADS={}", threads)});
  for (const char* pass : {"AISCALE_FAULT", "AISCALE_FAILURE_DIR", "AISCALE_GPT2_VOCAB_DIR", "PATH",
                           "LD_LIBRARY_PATH"})
    if (std::getenv(pass)) argv.insert(argv.end(), {"-x", pass});
  argv.insert(argv.end(), l.extra_mpirun_args.begin(), l.extra_mpirun_args.end());
  argv.push_back(self_exe);
  argv.insert(argv.end(), l.command.begin(), l.command.end());
  return argv;
}

namespace {

// The mpirun child, for the signal handler: Ctrl-C or a scheduler's SIGTERM goes on to it
// (mpirun passes it to the ranks, which checkpoint and stop).
volatile pid_t g_mpirun_pid = 0;
extern "C" void pass_signal_on(int sig) {
  if (g_mpirun_pid > 0) ::kill(g_mpirun_pid, sig);
}

// "0-3", "1, 3", "0-1, 5".
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") +
           (j == i ? std::to_string(ranks[i])
                   : fmt::format("{}{}{}", ranks[i], j == i + 1 ? ", " : "-", ranks[j]));
    i = j + 1;
  }
  return out;
}

}  // namespace

std::vector<RankFailureRecord> read_failure_records(const std::string& dir) {
  std::vector<RankFailureRecord> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    try {
      std::ifstream in(entry.path());
      const nlohmann::json j = nlohmann::json::parse(in);
      RankFailureRecord r;
      r.rank = j.at("rank").get<int>();
      r.host = j.value("host", "");
      r.exit_code = j.value("exit_code", 1);
      r.message = j.at("message").get<std::string>();
      out.push_back(std::move(r));
    } catch (const std::exception&) {
      // a record cut short by the rank's end: the summary counts the rank among the ended
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

std::string launch_failure_summary(const std::vector<RankFailureRecord>& records, int ranks,
                                   int status) {
  if (status == 0 && records.empty()) return "";
  if (records.empty())
    return fmt::format("launch: mpirun ended with status {} and no rank reported an error (a rank "
                       "killed by a signal or by the system, e.g. out of memory: see the lines "
                       "above)", status);
  // Ranks with the same message together, in the order of their first rank.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& r : records) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == r.message; });
    if (it == groups.end()) groups.push_back({r.message, {r.rank}});
    else it->second.push_back(r.rank);
  }
  std::string line = fmt::format("launch: {} of {} rank(s) failed", records.size(), ranks);
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [message, which] = groups[i];
    line += fmt::format("{} rank{} {}: {}", i == 0 ? " —" : " |", which.size() > 1 ? "s" : "",
                        rank_list(which), message);
  }
  const int others = ranks - static_cast<int>(records.size());
  if (others > 0) line += fmt::format(" (the other {} ended with them)", others);
  return line;
}

int run_local_launch(const LocalLaunch& l) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // The ranks' failure records: a fresh folder of this launch, passed to them by mpirun -x.
  std::string tmpl = (std::filesystem::temp_directory_path() / "aiscale-launch-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    fail("launch: cannot create a folder under {} for the ranks' failure records: {}; set TMPDIR "
         "to a writable folder", std::filesystem::temp_directory_path().string(),
         std::strerror(errno));
  const std::string failure_dir = tmpl;
  ::setenv("AISCALE_FAILURE_DIR", failure_dir.c_str(), 1);
  auto args = local_launch_argv(l, self);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  fmt::print(stderr, "launch: {}\n", fmt::join(args, " "));
  std::fflush(stderr);
  // A pipe closed by a successful exec: the child writes errno into it when exec fails.
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0)
    fail("launch: cannot start mpirun: pipe failed: {}", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) fail("launch: cannot start mpirun: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::close(exec_pipe[0]);
    ::execvp(cargs[0], cargs.data());
    const int err = errno;
    [[maybe_unused]] ssize_t n = ::write(exec_pipe[1], &err, sizeof err);
    std::_Exit(127);
  }
  ::close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  while ((got = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(failure_dir, ec);
    fail("launch: cannot run '{}': {} — install OpenMPI (scripts/setup.sh installs openmpi-bin) "
         "or pass --mpirun PATH", l.mpirun, std::strerror(exec_errno));
  }
  g_mpirun_pid = pid;
  std::signal(SIGINT, pass_signal_on);
  std::signal(SIGTERM, pass_signal_on);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  g_mpirun_pid = 0;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const int status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  const std::string summary = launch_failure_summary(read_failure_records(failure_dir), l.ranks,
                                                     status);
  if (!summary.empty()) fmt::print(stderr, "{}\n", summary);
  std::error_code ec;
  std::filesystem::remove_all(failure_dir, ec);
  return status;
}

}  // namespace aiscale::launch
