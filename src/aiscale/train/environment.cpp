#include "aiscale/train/environment.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "aiscale/core/build_info.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/profile/gpu_power.h"
#include "aiscale/train/trace_writer.h"

#ifdef AISCALE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef AISCALE_HAVE_NCCL
#include <nccl.h>
#endif
#ifdef AISCALE_HAVE_MPI
#include <mpi.h>
#endif

extern "C" char** environ;
// OpenBLAS's build description; always linked (the CPU backend's GEMM).
extern "C" char* openblas_get_config(void);

namespace aiscale::train {
namespace {

// cuDNN is linked only where the build found it: asked for through the dynamic linker.
std::string cudnn_version() {
  using Fn = size_t (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "cudnnGetVersion"));
  if (!fn) return "";
  const size_t v = fn();  // e.g. 90100: major * 10000 + minor * 100 + patch (cuDNN 9)
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::string cuda_version_text(int v) {  // 12040 -> "12.4"
  return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "";
}

}  // namespace

nlohmann::json library_versions() {
  nlohmann::json j;
  int runtime = 0, driver = 0;
#ifdef AISCALE_HAVE_CUDA
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
#endif
  if (driver == 0) driver = profile::nvml_cuda_driver_version();
  j["cuda_runtime"] = cuda_version_text(runtime);
  j["cuda_driver"] = cuda_version_text(driver);
  j["nvidia_driver"] = profile::nvml_driver_version();
  j["cudnn"] = cudnn_version();
  std::string nccl;
#ifdef AISCALE_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess) nccl = fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
#endif
  j["nccl"] = nccl;
  std::string mpi;
#ifdef AISCALE_HAVE_MPI
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(text, &len) == MPI_SUCCESS) mpi = std::string(text, static_cast<size_t>(len));
  while (!mpi.empty() && (mpi.back() == '\n' || mpi.back() == '\0')) mpi.pop_back();
#endif
  j["mpi"] = mpi;
  const char* blas = openblas_get_config();
  j["openblas"] = blas ? blas : "";
  return j;
}

namespace {

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (size_t i = 0; i < raw.size();) {
    const size_t end = raw.find('\0', i);
    std::string arg = raw.substr(i, end == std::string::npos ? std::string::npos : end - i);
    const bool plain = !arg.empty() && arg.find_first_of(" \t\"'$\\") == std::string::npos;
    if (!out.empty()) out += ' ';
    out += plain ? arg : fmt::format("'{}'", arg);
    if (end == std::string::npos) break;
    i = end + 1;
  }
  return out;
}

// The variables that change what a run does or how fast. Read from the whole environment
// (not through core/env.h's accessors: this records them, it does not act on them).
nlohmann::json relevant_environment() {
  nlohmann::json j = nlohmann::json::object();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(0, eq);
    for (const char* prefix : {"NCCL_", "OMP_", "SLURM_", "AISCALE_", "OPENBLAS_", "CUDA_VISIBLE_DEVICES",
                               "CUDA_DEVICE_ORDER", "MASTER_ADDR", "MASTER_PORT"})
      if (name.starts_with(prefix)) {
        j[name] = kv.substr(eq + 1);
        break;
      }
  }
  return j;
}

nlohmann::json this_rank(int rank, const std::string& device) {
  nlohmann::json r = {{"rank", rank}, {"host", host_name()}, {"pid", static_cast<int64_t>(::getpid())}};
  if (device == "cuda") {
    const std::string bus = parallel::cuda_current_gpu_pci_bus_id();
    const profile::NodeGpu g = profile::describe_gpu(bus);
    r["gpu_pci_bus_id"] = bus;
    r["gpu_name"] = g.name.empty() ? parallel::cuda_current_gpu_name() : g.name;
    r["gpu_uuid"] = g.uuid;
  } else {
    r["cpu"] = cpu_model_name();
  }
  return r;
}

}  // namespace

std::string version_text() {
  const BuildInfo& b = build_info();
  std::string built = b.cuda ? fmt::format("CUDA (nvcc {})", b.cuda_compiler) : "CPU only (no CUDA)";
  if (b.nccl) built += ", NCCL";
  if (b.mpi) built += ", MPI";
  const nlohmann::json lib = library_versions();
  std::string runs;
  auto add = [&](const char* name, const char* key) {
    const std::string v = lib.value(key, "");
    if (!v.empty()) runs += fmt::format("{}{} {}", runs.empty() ? "" : ", ", name, v);
  };
  add("CUDA runtime", "cuda_runtime");
  add("CUDA driver", "cuda_driver");
  add("NVIDIA driver", "nvidia_driver");
  add("cuDNN", "cudnn");
  add("NCCL", "nccl");
  std::string mpi = lib.value("mpi", "");
  if (const size_t comma = mpi.find(','); comma != std::string::npos) mpi.resize(comma);
  if (!mpi.empty()) runs += (runs.empty() ? "" : ", ") + mpi;
  std::string blas = lib.value("openblas", "");
  if (const size_t space = blas.find(' ', blas.find(' ') + 1); space != std::string::npos)
    blas.resize(space);  // "OpenBLAS 0.3.21 ..." -> "OpenBLAS 0.3.21"
  if (!blas.empty()) runs += (runs.empty() ? "" : ", ") + blas;
  return fmt::format("aiscale {} (commit {}, {} build, {})\nbuilt with: {}\nruns with: {}\n",
                     b.version, b.git_commit, b.build_type, b.compiler, built,
                     runs.empty() ? "(no optional library found)" : runs);
}

std::string fnv1a64_hex(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

nlohmann::json environment_record(parallel::Communicator& comm, const std::string& device,
                                  const std::string& config_toml) {
  const std::vector<std::string> ranks =
      gather_text(comm, this_rank(comm.rank(), device).dump());
  if (comm.rank() != 0) return {};
  const BuildInfo& b = build_info();
  nlohmann::json j;
  j["aiscale_version"] = b.version;
  j["git_commit"] = b.git_commit;
  j["build"] = {{"compiler", b.compiler},
                {"build_type", b.build_type},
                {"cuda_compiler", b.cuda_compiler},
                {"cuda", b.cuda},
                {"nccl", b.nccl},
                {"mpi", b.mpi}};
  j["libraries"] = library_versions();
  j["device"] = device;
  j["world_size"] = comm.world();
  j["communicator"] = comm.backend();
  nlohmann::json per_rank = nlohmann::json::array();
  for (const std::string& text : ranks) per_rank.push_back(nlohmann::json::parse(text));
  j["ranks"] = per_rank;
  j["command_line"] = command_line();
  j["working_directory"] = std::filesystem::current_path().string();
  j["environment"] = relevant_environment();
  j["config_hash"] = {{"algorithm", "fnv1a64"},
                      {"of", "config.toml as written to the run directory"},
                      {"value", config_toml.empty() ? "" : fnv1a64_hex(config_toml)}};
  j["recorded"] = utc_iso8601();
  return j;
}

void write_environment(const std::string& dir, parallel::Communicator& comm,
                       const std::string& device, const std::string& config_toml) {
  const nlohmann::json j = environment_record(comm, device, config_toml);
  if (comm.rank() == 0)
    atomic_write_file((std::filesystem::path(dir) / "environment.json").string(), j.dump(2) + "\n");
}

}  // namespace aiscale::train
