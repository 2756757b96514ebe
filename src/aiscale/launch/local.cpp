#include "aiscale/launch/local.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

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
  for (const char* pass : {"AISCALE_FAULT", "AISCALE_GPT2_VOCAB_DIR", "PATH", "LD_LIBRARY_PATH"})
    if (std::getenv(pass)) argv.insert(argv.end(), {"-x", pass});
  argv.insert(argv.end(), l.extra_mpirun_args.begin(), l.extra_mpirun_args.end());
  argv.push_back(self_exe);
  argv.insert(argv.end(), l.command.begin(), l.command.end());
  return argv;
}

void exec_local_launch(const LocalLaunch& l) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto args = local_launch_argv(l, self);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  fmt::print(stderr, "launch: {}\n", fmt::join(args, " "));
  std::fflush(stderr);
  ::execvp(cargs[0], cargs.data());
  fail("launch: cannot run '{}': {} — install OpenMPI (scripts/setup.sh installs openmpi-bin) or "
       "pass --mpirun PATH", l.mpirun, std::strerror(errno));
}

}  // namespace aiscale::launch
