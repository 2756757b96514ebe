// environment.json: the record that lets a run be reproduced and compared: what built
// the binary (version, git commit, compiler), the libraries it runs with (CUDA runtime
// and driver, cuDNN, NCCL, MPI, OpenBLAS), each rank's host and GPU (name, UUID), the
// command line, the environment variables that change behaviour (NCCL_*, OMP_*, SLURM_*,
// CUDA_VISIBLE_DEVICES, AISCALE_*, OPENBLAS_*), and the FNV-1a 64-bit hash of the
// resolved config.toml. Written into every run directory (train, bench language
// --run-dir, and so every point of a study).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"

namespace aiscale::train {

// The record; a collective (each rank adds its host and GPU). `device`: "cpu" or "cuda".
// `config_toml`: the resolved configuration as written to the run directory ("" if none).
nlohmann::json environment_record(parallel::Communicator& comm, const std::string& device,
                                  const std::string& config_toml);

// Rank 0 writes <dir>/environment.json (aside + rename); a collective.
void write_environment(const std::string& dir, parallel::Communicator& comm,
                       const std::string& device, const std::string& config_toml);

// The libraries this process runs with: cuda_runtime, cuda_driver, nvidia_driver, cudnn,
// nccl, mpi, openblas (each "" where absent). No collective; MPI need not be initialised.
nlohmann::json library_versions();

// What `aiscale --version` prints before the data paths: the version, the commit, the build
// and the libraries it was built and runs with.
std::string version_text();

// FNV-1a, 64 bits, as 16 hex digits (the config hash of the record).
std::string fnv1a64_hex(const std::string& text);

}  // namespace aiscale::train
