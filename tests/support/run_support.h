// Functions for tests that run the aiscale binary on tiny models and token shards.
#pragma once
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/data/token_shard.h"

namespace aiscale::testsupport {

namespace fs = std::filesystem;

// A fresh temporary folder per test.
inline fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("aiscale-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Token shards of byte-level "text" with some structure (so the loss can fall).
inline void write_byte_shards(const fs::path& dir, int64_t train_tokens = 40000, int64_t val_tokens = 4000) {
  auto fill = [](int64_t n, uint32_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran ", "far "};
    uint32_t x = seed;
    size_t i = 0;
    while (i < t.size()) {
      x = x * 1664525u + 1013904223u;
      for (const char* w = words[(x >> 16) % 10]; *w && i < t.size(); ++w) t[i++] = static_cast<unsigned char>(*w);
    }
    return t;
  };
  for (auto [name, n, seed] : {std::tuple{"tiny_train_000000.bin", train_tokens, 1u},
                               std::tuple{"tiny_val_000000.bin", val_tokens, 2u}}) {
    data::TokenShardWriter w(dir / name);
    auto t = fill(n, seed);
    w.append(std::span<const int32_t>(t));
    w.finish();
  }
}

inline std::string tiny_config(const fs::path& dir) {
  std::string cfg = "[model]\npreset = \"gpt-tiny\"\nvocab_size = 256\nblock_size = 32\n"
                    "[data]\ntrain = \"" + (dir / "tiny_train_*.bin").string() + "\"\n"
                    "val = \"" + (dir / "tiny_val_*.bin").string() + "\"\ntokenizer = \"byte\"\n"
                    "[train]\nbatch_size = 4\nseq_len = 32\nsteps = 20\nwarmup_steps = 2\nlr = 3e-3\n"
                    "threads = 1\neval_batches = 2\n"
                    "[run]\ndir = \"" + (dir / "runs").string() + "\"\n";
  std::ofstream(dir / "tiny.toml") << cfg;
  return (dir / "tiny.toml").string();
}

struct RunOutput {
  int exit_code = -1;       // exit status, or 128 + signal
  std::string output;       // stdout and stderr
};

inline RunOutput run_command(const std::string& cmd) {
  RunOutput r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

// Multi-GPU tests on a host with one GPU: switched on by the multi-GPU test programs
// (tests/gpu2/gpu2_support.h's run_multi_gpu_tests) where AISCALE_TEST_SHARED_GPU=1 and one
// GPU is visible. run_aiscale then runs the GPU ranks of every command that launches
// several ranks over MPI, whose GPU ranks stage their collectives through host memory and
// may share a GPU (NCCL refuses two ranks on one GPU).
inline bool& shared_gpu_ranks() {
  static bool on = false;
  return on;
}

// `args` as run_aiscale runs it: unchanged unless shared_gpu_ranks() is on and `args`
// launches several ranks (`launch -n N ... -- COMMAND`, N > 1); then parallel.communicator
// = nccl or auto becomes mpi, and a train or bench language command that names no
// communicator is given parallel.communicator = mpi.
inline std::string with_shared_gpu_ranks(std::string args) {
  if (!shared_gpu_ranks() || args.rfind("launch ", 0) != 0) return args;
  const size_t n = args.find(" -n "), sep = args.find(" -- ");
  if (n == std::string::npos || sep == std::string::npos || n > sep ||
      std::atoi(args.c_str() + n + 4) < 2)
    return args;
  auto replace_all = [&args](const std::string& from, const std::string& to) {
    for (size_t at = args.find(from); at != std::string::npos; at = args.find(from, at + to.size()))
      args.replace(at, from.size(), to);
  };
  for (const std::string kind : {"nccl", "auto"}) {
    replace_all("parallel.communicator=" + kind, "parallel.communicator=mpi");
    replace_all("--communicator " + kind, "--communicator mpi");
  }
  if (args.find("parallel.communicator=") != std::string::npos ||
      args.find("--communicator ") != std::string::npos)
    return args;
  const std::string command = args.substr(sep + 4);
  if (command.rfind("train ", 0) == 0) return args + " --set parallel.communicator=mpi";
  if (command.rfind("bench language ", 0) == 0) return args + " --communicator mpi";
  return args;
}

inline RunOutput run_aiscale(const std::string& args, const std::string& env = "") {
  return run_command(env + (env.empty() ? "" : " ") + std::string(AISCALE_BINARY) + " " +
                     with_shared_gpu_ranks(args));
}

inline std::vector<nlohmann::json> read_metrics(const fs::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Per rank: the bytes of the "optimizer_state" event of a run's steps.jsonl (the optimizer
// state the rank's wrapper holds).
inline std::map<int, double> optimizer_state_bytes(const fs::path& run) {
  std::map<int, double> out;
  std::ifstream in(run / "steps.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", std::string()) == "optimizer_state")
      out[j["rank"].get<int>()] = j["optimizer_state_bytes"].get<double>();
  }
  return out;
}

// Relative L2 distance |a - b| / |a| of two vectors of one length.
inline double vector_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double diff2 = 0, norm2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm2 += double(a[i]) * a[i];
  }
  return std::sqrt(diff2 / norm2);
}

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace aiscale::testsupport
