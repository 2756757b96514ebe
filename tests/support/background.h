// Running the aiscale binary in the background, for tests that signal it while it works.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace aiscale::testsupport {

// Polls `done` every 50 ms for up to `seconds`; its last answer.
inline bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// Starts `aiscale ARGS...` with `env` (NAME, value) added, stdout and stderr into `out`.
inline pid_t start_aiscale(const std::vector<std::string>& args, const std::filesystem::path& out,
                           const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv = {const_cast<char*>(AISCALE_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(AISCALE_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

// Its exit status (128 + signal if killed), or -1 when it did not end within `seconds`
// (it is then killed).
inline int wait_exit(pid_t pid, double seconds) {
  int status = 0;
  const bool ended = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, seconds);
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace aiscale::testsupport
