#include "aiscale/core/env.h"

#include <cstdlib>
#include <cstring>
#include <iterator>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::env {
namespace {

// One entry per variable. Add new ones at the end of their group; keep `purpose` to what
// the variable is for and the file that reads it.
const Variable kVariables[] = {
    // --- user knobs ---
    {"AISCALE_GPT2_VOCAB_DIR", "a directory", "", Kind::user,
     "where the GPT-2 vocabulary (vocab.json, merges.txt) lies, instead of the npm copy "
     "beside the sources (data/tokenizer.cpp; aiscale launch passes it to the ranks)"},
    {"AISCALE_SYSTEMS_DIR", "a directory", "", Kind::user,
     "the system catalogue the planner reads, instead of the one beside the binary "
     "(plan/catalog.cpp)"},
    {"AISCALE_CONFIGS_DIR", "a directory", "", Kind::user,
     "the example configs, instead of the copy beside the binary (core/paths.cpp; shown by "
     "aiscale --version)"},
    {"AISCALE_VEGA_DIR", "a directory", "", Kind::user,
     "a node_modules folder holding vega, vega-lite and vega-embed for the HTML report, "
     "instead of the copy beside the binary (report/vega_assets.cpp through core/paths.cpp)"},
    {"AISCALE_NCCL_BLOCKING", "0 | 1", "1", Kind::user,
     "0: NCCL communicators in non-blocking mode, every NCCL call polled against "
     "parallel.timeout_s; costs ~50 us per collective (63 instead of 13 us at 1 MiB on 2 "
     "H100s). 1 (default): blocking, the calls bounded by a monitor thread that ends the "
     "process (parallel/nccl/call_monitor.h; docs/guide/communication.md)"},
    {"AISCALE_FAILURE_DIR", "a directory", "", Kind::user,
     "where a failing rank records its error as rank-R.json; aiscale launch sets it to a folder "
     "of its own and prints one summary line from the records (parallel/rank_failure.cpp, "
     "launch/local.cpp); set it on a shared file system to collect the failures of srun jobs"},
    {"AISCALE_STORE_PORT", "a TCP port", "", Kind::user,
     "the port of the TCP store rank 0 serves in a torchrun-style launch (RANK/WORLD_SIZE with "
     "MASTER_ADDR), the same on every rank; unset: MASTER_PORT, or MASTER_PORT+1 where "
     "torchrun's agent serves its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True) "
     "(parallel/launch_env.cpp; docs/guide/launching.md)"},
    {"AISCALE_STUDY_POINT", "a directory", "", Kind::user,
     "set by aiscale scale on every process of a point it runs (mpirun and the ranks inherit "
     "it): the point's folder, by which its processes are found to pass a stop signal on, and "
     "left-over ones before a rerun (sweep/point_processes.cpp); aiscale tune sets it on each "
     "trial of a search over training runs (its run directory); not meant to be set by hand"},
    {"AISCALE_START_GATE", "a file path", "", Kind::user,
     "a training run sets itself up and waits before its first step until this file exists "
     "(or a stop signal arrives): aiscale tune sets it up on a GPU while the GPU's trial "
     "trains and creates the file when the GPU is free (train/session.cpp, "
     "sweep/train_search.cpp)"},
    // --- test: fault injection ---
    {"AISCALE_FAULT", "nan@STEP | kill@STEP:RANK | fail@STEP:RANK | term@STEP | slow@RANK:MS | blowup@STEP",
     "", Kind::test,
     "makes a training run fail on purpose, for the tests of failure handling "
     "(train/session.cpp; aiscale launch passes it to the ranks)"},
    // --- diagnostics: print or time, change no result ---
    {"AISCALE_CUDA_VERBOSE", "0 | 1", "0", Kind::diagnostic,
     "the CUDA model prints its chosen kernel paths, GEMM plans and gradient buckets to "
     "stderr (read in nn/models/gpt_factory_nocuda.cpp, parallel/data_parallel/reducer.cu)"},
    {"AISCALE_CUDA_TIMING", "0 | 1", "0", Kind::diagnostic,
     "times the phases of every training step and every gradient bucket's collective with "
     "CUDA events (adds a host wait per step) and prints means and medians per rank at exit "
     "(profile/step_timer.cu)"},
    // --- measurement switches: an alternative path kept for a measurement or a test ---
    {"AISCALE_CUDA_ATTENTION", "auto | cudnn | flash | simple", "auto", Kind::measurement,
     "the GPU attention kernels when train.attention is auto (read in "
     "nn/models/gpt_factory_nocuda.cpp)"},
    {"AISCALE_CUDA_VOCAB_PARALLEL", "0 | 1", "1", Kind::measurement,
     "0: under tensor parallelism the token embedding and the tied LM head whole on every "
     "tensor rank (each computing all the logits) instead of split by vocabulary rows (read "
     "in nn/models/gpt_factory_nocuda.cpp)"},
    {"AISCALE_CUDNN_CONV_ENGINES", "auto | exhaustive | legacy", "auto", Kind::measurement,
     "legacy: the GPU vision convolutions choose among cuDNN's legacy algorithms only, "
     "without timing its graph-API engines beside them; exhaustive: time every graph-API "
     "engine configuration the heuristics list, knob variants and engines compiled at run "
     "time included (longer start-up) (read in ops/vision/cuda/conv_cudnn.cu)"},
    {"AISCALE_CUDA_AUTOTUNE", "0 | 1", "1", Kind::measurement,
     "0: cuBLASLt's first heuristic instead of timing its candidates in the warm-up step "
     "(read in nn/models/gpt_factory_nocuda.cpp; the gpu2 tests turn it off for reproducible GEMMs)"},
    {"AISCALE_CUDA_FUSED_NORM", "0 | 1", "1", Kind::measurement,
     "0: the gradient norm in a pass of its own also over the copy engines, whose sum "
     "kernels otherwise add up its squares (the data-parallel reducer, read in nn/models/gpt_factory_nocuda.cpp; test "
     "Gpu2.CopyEngineFusedNormMatchesItsOwnPass)"},
};

}  // namespace

const Variable* variables(size_t* count) {
  *count = std::size(kVariables);
  return kVariables;
}

const Variable& variable(const char* name) {
  for (const Variable& v : kVariables)
    if (std::strcmp(v.name, name) == 0) return v;
  throw Error(std::string("environment variable ") + name +
              " is read but not registered in core/env.cpp: add it to the table there");
}

std::string get(const char* name) {
  const Variable& v = variable(name);
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : std::string(v.fallback);
}

std::string choice(const char* name) {
  const Variable& v = variable(name);
  const std::string value = get(name), values = v.values;
  for (size_t at = 0; at <= values.size();) {  // the words between " | "
    size_t end = values.find(" | ", at);
    if (end == std::string::npos) end = values.size();
    if (values.compare(at, end - at, value) == 0 && end - at == value.size()) return value;
    at = end + 3;
  }
  throw Error(std::string(name) + " = '" + value + "' is not one of " + values +
              ": set one of those or unset it");
}

bool is_set(const char* name) {
  (void)variable(name);
  const char* value = std::getenv(name);
  return value && *value;
}

bool flag(const char* name) {
  const std::string value = get(name);
  return value != "0" && value != "false" && value != "off" && !value.empty();
}

const char* kind_name(Kind k) {
  static constexpr EnumName<Kind> kinds[] = {{Kind::user, "user"},
                                             {Kind::measurement, "measurement"},
                                             {Kind::diagnostic, "diagnostic"},
                                             {Kind::test, "test"}};
  return enum_name(kinds, k);
}

}  // namespace aiscale::env
