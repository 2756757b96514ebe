#include "aiscale/sweep/point.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/launch/local.h"

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
    c.ranks = j.at("ranks").get<int>();
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
  for (const char* name : {"run", "log.txt", "exit_code"}) fs::remove_all(dir / name, ec);
}

int run_point_local(const std::string& point_dir, const LocalExecutor& executor) {
  const PointCommand c = read_point_command(point_dir);
  launch::LocalLaunch l;
  l.ranks = c.ranks;
  l.threads_per_rank = c.threads_per_rank;
  l.mpirun = executor.mpirun;
  l.command = c.argv;
  const std::string self =
      executor.self_exe.empty() ? fs::read_symlink("/proc/self/exe").string() : executor.self_exe;
  std::vector<std::string> args = launch::local_launch_argv(l, self);
  const std::string log = (fs::path(point_dir) / "log.txt").string();
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot create '{}': {}", log, std::strerror(errno));
  const std::string header = fmt::format("$ {}\n", fmt::join(args, " "));
  if (::write(fd, header.data(), header.size()) < 0) {}
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    fail("cannot start a process for point '{}': {}", point_dir, std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, 0);
    ::execvp(cargs[0], cargs.data());
    std::string msg = fmt::format("cannot run '{}': {} (install OpenMPI or pass --mpirun PATH)\n",
                                  cargs[0], std::strerror(errno));
    if (::write(2, msg.data(), msg.size()) < 0) {}
    ::_exit(127);
  }
  ::close(fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  atomic_write_file((fs::path(point_dir) / "exit_code").string(), std::to_string(code) + "\n");
  return code;
}

}  // namespace aiscale::sweep
