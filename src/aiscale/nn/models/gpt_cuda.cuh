// The CUDA GPT model's constructor, callable from host code (no CUDA types here).
// make_gpt_cuda (gpt_factory_nocuda.cpp) validates the configuration, reads the
// measurement switches and calls this; the model draws its initial parameters from the
// seed a range at a time (gpt_init_ranges), never the whole model on the host.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda_decoder.h"

namespace aiscale::nn::detail {

// The CUDA model's measurement switches and diagnostics, read from the environment by
// host code (core/env.cpp lists each variable with what it is for).
struct GptCudaSwitches {
  std::string attention = "auto";  // AISCALE_CUDA_ATTENTION, used when train.attention is auto
  bool vocab_parallel = true;      // AISCALE_CUDA_VOCAB_PARALLEL
  bool autotune = true;            // AISCALE_CUDA_AUTOTUNE
  bool fused_norm = true;          // AISCALE_CUDA_FUSED_NORM (the data-parallel reducer's)
  bool verbose = false;            // AISCALE_CUDA_VERBOSE
  bool timing = false;             // AISCALE_CUDA_TIMING
};
GptCudaSwitches gpt_cuda_switches_from_env();

// A pipeline stage's part (host code computes it with parallel/pipeline/schedule.h, whose
// C++20 header the CUDA sources do not include): its layers and its schedule.
struct GptCudaPipelinePlan {
  struct Pass {
    bool forward = true;
    int microbatch = 0;
  };
  int microbatches = 1;
  int64_t layer_begin = 0, layer_end = 0;  // [begin, end) of model.n_layer
  std::vector<Pass> passes;                // this stage's forwards and backwards in order
  int slots = 1;                           // micro-batches whose inputs it holds at once
};
// Stage `stage` of `stages`: the layers as on CPU ranks (parallel/pipeline/schedule.h's
// stage_layers), o.pipeline_schedule's passes over o.microbatches (which must divide
// o.batch). Host code in every build.
GptCudaPipelinePlan gpt_cuda_pipeline_plan(const GptConfig& c, const GptRunOptions& o, int stages,
                                           int stage);

// Builds the model on the current CUDA device with the seed's initial parameters (o.seed:
// gpt_init_ranges, a range at a time into this rank's buffers or shards). tensor_group: the tensor-parallel group (a device
// communicator of several ranks, each holding a slice of every layer: gpt_cuda_tp.cuh), or
// null; data_group (with a tensor group or a pipeline): the ranks holding the same slices
// or stage in the other data-parallel copies, over which the gradients are summed, or null
// (one copy); pipeline_group: the pipeline's ranks (a device communicator of several ranks,
// this rank one stage of it: gpt_cuda_pp.cuh, doing `plan`, holding its layers, the
// embeddings and the final norm), or null.
std::unique_ptr<GptModel> create_gpt_cuda(const GptConfig& c, const GptRunOptions& o,
                                          const GptCudaSwitches& switches,
                                          parallel::Communicator* tensor_group,
                                          parallel::Communicator* data_group,
                                          parallel::Communicator* pipeline_group = nullptr,
                                          const GptCudaPipelinePlan& plan = {});

// Number of usable CUDA devices (0 when there is no driver or no GPU; never throws).
// The decoder of gpt_cuda_decoder.h on the current device (make_cuda_gpt_decoder has checked
// the shape and the limits).
std::unique_ptr<CudaGptDecoder> create_cuda_gpt_decoder(const GptConfig& c, const float* params,
                                                        int max_streams, int max_rows,
                                                        int context);
int cuda_device_count_checked();

}  // namespace aiscale::nn::detail
