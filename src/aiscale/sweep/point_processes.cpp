#include "aiscale/sweep/point_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"
#include "aiscale/sweep/stop_signals.h"

namespace aiscale::sweep {
namespace fs = std::filesystem;

namespace {

std::string read_proc_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The value of `name` in a NUL-separated environment block; nullopt-like "" with found=false.
bool env_value(const std::string& block, const std::string& name, std::string& value) {
  const std::string key = name + "=";
  size_t start = 0;
  while (start < block.size()) {
    size_t end = block.find('\0', start);
    if (end == std::string::npos) end = block.size();
    if (block.compare(start, key.size(), key) == 0) {
      value = block.substr(start + key.size(), end - start - key.size());
      return true;
    }
    start = end + 1;
  }
  return false;
}

bool matches(const std::string& value, const std::string& point_dir) {
  if (!point_dir.empty() && point_dir.back() == '/') return value.rfind(point_dir, 0) == 0;
  return value == point_dir;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<PointProcess> find_point_processes(const std::string& point_dir) {
  std::vector<PointProcess> out;
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == self) continue;
    // Another user's processes (unreadable) and zombies (an empty environment) are not ours
    // to end.
    std::string value;
    if (!env_value(read_proc_file(entry.path() / "environ"), kPointEnv, value)) continue;
    if (!matches(value, point_dir)) continue;
    std::string cmd = read_proc_file(entry.path() / "cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
    out.push_back({pid, value, cmd});
  }
  return out;
}

void signal_processes(const std::vector<PointProcess>& processes, int sig) {
  for (const auto& p : processes) ::kill(p.pid, sig);
}

namespace {

// The processes of `point_dir`, looked for a few times: a process in the middle of exec
// (a script starting its next program) may show no environment for a moment, and one
// missed scan must not count as "none left".
std::vector<PointProcess> find_settled(const std::string& point_dir, int scans) {
  std::vector<PointProcess> found;
  for (int i = 0; i < scans && found.empty(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    found = find_point_processes(point_dir);
  }
  return found;
}

}  // namespace

int end_point_processes(const std::string& point_dir, int sig, double deadline_s) {
  auto left = find_settled(point_dir, 4);
  const int found = static_cast<int>(left.size());
  if (left.empty()) return 0;
  std::set<pid_t> signalled;
  auto signal_new = [&] {
    if (sig == 0) return;
    for (const auto& p : left)
      if (signalled.insert(p.pid).second) ::kill(p.pid, sig);
  };
  signal_new();
  const double until = now_s() + deadline_s;
  while (!left.empty() && now_s() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = find_settled(point_dir, 3);
    // One that appeared since (a process caught in exec at the first look) gets it too,
    // once: a second signal may mean "stop now" to a rank that is writing a checkpoint.
    signal_new();
  }
  // What would not end in time is killed; the kernel ends it at once, its parent reaps it.
  for (int attempt = 0; !left.empty() && attempt < 100; ++attempt) {
    signal_processes(left, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = find_settled(point_dir, 3);
  }
  return found;
}

std::string describe_processes(const std::vector<PointProcess>& processes, size_t max) {
  std::string out;
  for (size_t i = 0; i < processes.size() && i < max; ++i) {
    std::string cmd = processes[i].command.substr(0, 60);
    if (processes[i].command.size() > 60) cmd += "...";
    out += fmt::format("{}{} ({})", i ? ", " : "", processes[i].pid, cmd);
  }
  if (processes.size() > max) out += fmt::format(" and {} more", processes.size() - max);
  return out;
}

pid_t start_logged_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const std::string& log, bool append, const std::string& exec_failed,
                           const std::function<void(pid_t)>& on_started) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '{}': {}", log, std::strerror(errno));
  const std::string header = fmt::format("$ {}\n", fmt::join(argv, " "));
  if (::write(fd, header.data(), header.size()) < 0) {}
  // Everything the child needs is built before fork: it only calls async-signal-safe
  // functions before exec.
  std::vector<std::string> args = argv, envs = env;
  std::vector<char*> cargs, cenv;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = 0;
  {
    BlockStopSignals blocked;
    pid = ::fork();
    if (pid == 0) {
      ::setsid();
      reset_stop_signals_in_child();
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      const int null_in = ::open("/dev/null", O_RDONLY);
      if (null_in >= 0) ::dup2(null_in, 0);
      ::execvpe(cargs[0], cargs.data(), cenv.data());
      if (::write(2, exec_failed.data(), exec_failed.size()) < 0) {}
      ::_exit(127);
    }
    if (pid > 0 && on_started) on_started(pid);
  }
  ::close(fd);
  if (pid < 0) fail("cannot start '{}': {}", argv[0], std::strerror(errno));
  return pid;
}

}  // namespace aiscale::sweep
