// What the binary was built from and with, fixed at build time: the version, the git
// commit (`git describe --always --dirty` of the source tree at build time; "unknown"
// when built from a tarball), the compiler and the optional libraries compiled in.
#pragma once
#include <string>

namespace aiscale {

struct BuildInfo {
  std::string version;       // AISCALE_VERSION ("0.1.0")
  std::string git_commit;    // "40eab4d", "40eab4d-dirty" or "unknown"
  std::string compiler;      // "GCC 12.2.0"
  std::string build_type;    // "Release"
  std::string cuda_compiler; // nvcc's version, "" in a CPU-only build
  bool cuda = false, nccl = false, mpi = false;
};

const BuildInfo& build_info();

}  // namespace aiscale
