// make_gpt_cuda and cuda_available for every build. Without CUDA they say so; with CUDA
// they check the configuration and hand over to gpt_cuda.cu, whose model draws its initial
// parameters with gpt_init_ranges (host code, shared with the CPU model so that both start
// from the same values for a seed) a range at a time. Keeping the checks in a .cpp keeps
// host-only code (fmt, the pipeline schedules) out of nvcc. A GPU pipeline stage's plan
// (its layers and schedule) is computed here too.
#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda_decoder.h"

#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/parallel/pipeline/schedule.h"
#include "aiscale/parallel/process_groups.h"

namespace aiscale::nn {

// Host code in every build (its unit tests run without CUDA).
namespace detail {

GptCudaPipelinePlan gpt_cuda_pipeline_plan(const GptConfig& c, const GptRunOptions& o, int stages,
                                           int stage) {
  namespace pipe = parallel::pipeline;
  if (o.microbatches < 1 || o.batch % o.microbatches)
    fail("parallel.microbatches = {} must divide the batch of {} rows", o.microbatches, o.batch);
  if (stages > c.n_layer)
    fail("{} pipeline stages for {} layers: at most one stage per layer", stages, c.n_layer);
  GptCudaPipelinePlan plan;
  plan.microbatches = o.microbatches;
  const pipe::StageLayers layers = pipe::stage_layers(c.n_layer, stages, stage);
  plan.layer_begin = layers.begin;
  plan.layer_end = layers.end;
  const pipe::StageSchedule schedule =
      pipe::schedule_by_name(o.pipeline_schedule, stages, stage, o.microbatches);
  for (const pipe::Pass& p : schedule)
    plan.passes.push_back({p.kind == pipe::PassKind::forward, p.microbatch});
  plan.slots = pipe::max_in_flight(schedule);
  return plan;
}

}  // namespace detail

#ifndef AISCALE_HAVE_CUDA

std::unique_ptr<GptModel> make_gpt_cuda(const GptConfig&, const GptRunOptions&) {
  throw Error(
      "this aiscale was built without CUDA: rebuild with a CUDA compiler (cmake --preset cuda) "
      "or run on the CPU (device = \"cpu\")");
}

bool cuda_available() { return false; }

std::unique_ptr<CudaGptDecoder> make_cuda_gpt_decoder(const GptConfig&, const float*, int, int,
                                                      int) {
  throw Error(
      "this aiscale was built without CUDA: rebuild with a CUDA compiler (cmake --preset cuda) "
      "to sample on a GPU, or sample on the CPU (--device cpu)");
}

#else

std::unique_ptr<GptModel> make_gpt_cuda(const GptConfig& c, const GptRunOptions& o) {
  c.validate();
  if (!cuda_available())
    fail("no CUDA GPU is visible (cudaGetDeviceCount found none): run on a GPU node or use "
         "device = \"cpu\"");
  if (o.batch < 1) fail("batch size {} is invalid: it must be at least 1", o.batch);
  if (o.seq < 1 || o.seq > c.block_size)
    fail("sequence length {} is outside 1..{} (model.block_size): lower train.seq_len or raise "
         "model.block_size", o.seq, c.block_size);
  if (c.n_embd % 8 != 0)
    fail("model.n_embd = {} must be a multiple of 8 for the CUDA model (16-byte vectors)",
         c.n_embd);
  const int64_t hs = c.head_size();
  if (hs != 16 && hs != 32 && hs != 64 && hs != 128)
    fail("head size n_embd / n_head = {} is not supported by the CUDA attention kernels: "
         "choose 16, 32, 64 or 128 (GPT-2 uses 64)", hs);
  // Tensor parallelism (make_gpt has checked the layout): the group's ranks hold slices,
  // and with several data-parallel copies each rank's gradients are summed over its data
  // group (the ranks holding the same slices).
  parallel::Communicator* tensor =
      o.groups && o.groups->tensor().world() > 1 ? &o.groups->tensor() : nullptr;
  // Pipeline stages (make_gpt has checked the layout: no tensor group beside them): each
  // stage's gradients are summed over its data group too.
  parallel::Communicator* pipeline =
      o.groups && o.groups->pipeline().world() > 1 ? &o.groups->pipeline() : nullptr;
  parallel::Communicator* data =
      (tensor || pipeline) && o.groups->data().world() > 1 ? &o.groups->data() : nullptr;
  detail::GptCudaPipelinePlan plan;
  if (pipeline) plan = detail::gpt_cuda_pipeline_plan(c, o, pipeline->world(), pipeline->rank());
  // The model draws the seed's initial weights itself, a range at a time (gpt_init_ranges).
  return detail::create_gpt_cuda(c, o, detail::gpt_cuda_switches_from_env(), tensor, data,
                                 pipeline, plan);
}

namespace detail {

GptCudaSwitches gpt_cuda_switches_from_env() {
  GptCudaSwitches s;
  s.attention = env::get("AISCALE_CUDA_ATTENTION");
  s.vocab_parallel = env::flag("AISCALE_CUDA_VOCAB_PARALLEL");
  s.autotune = env::flag("AISCALE_CUDA_AUTOTUNE");
  s.fused_norm = env::flag("AISCALE_CUDA_FUSED_NORM");
  s.verbose = env::flag("AISCALE_CUDA_VERBOSE");
  s.timing = env::flag("AISCALE_CUDA_TIMING");
  return s;
}

}  // namespace detail

bool cuda_available() { return detail::cuda_device_count_checked() > 0; }

std::unique_ptr<CudaGptDecoder> make_cuda_gpt_decoder(const GptConfig& c, const float* params,
                                                      int max_streams, int max_rows, int context) {
  c.validate();
  if (c.llama())
    fail("model.family = \"llama\": the CUDA decoder runs the gpt2 family only; sample with "
         "--device cpu");
  if (!cuda_available())
    fail("no CUDA GPU is visible (cudaGetDeviceCount found none): sample on a GPU node or with "
         "--device cpu");
  if (c.n_embd % 8 != 0)
    fail("model.n_embd = {} must be a multiple of 8 for the CUDA decoder", c.n_embd);
  const int64_t hs = c.head_size();
  if (hs != 16 && hs != 32 && hs != 64 && hs != 128)
    fail("head size n_embd / n_head = {} is not supported by the CUDA decoder: 16, 32, 64 or "
         "128 (GPT-2 uses 64); sample with --device cpu", hs);
  if (max_streams < 1 || max_rows < 1)
    fail("the CUDA decoder needs at least one stream and one row (asked: {} streams, {} rows)",
         max_streams, max_rows);
  if (context == 0) context = static_cast<int>(c.block_size);
  if (context < 1 || context > c.block_size)
    fail("a decoding context of {} positions is outside 1..{} (model.block_size)", context,
         c.block_size);
  return detail::create_cuda_gpt_decoder(c, params, max_streams, max_rows, context);
}

#endif

}  // namespace aiscale::nn
