// Parts of the GPT model shared by every backend: initialisation and decay mask.
#include <cmath>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/process_groups.h"

namespace aiscale::nn {

std::vector<float> gpt_init_params(const GptConfig& c, uint64_t seed) {
  std::vector<float> out(static_cast<size_t>(c.num_params()));
  Rng rng(seed);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  for (const auto& p : GptLayout(c).tensors()) {
    const int64_t n = p.shape.numel();
    float* dst = out.data() + p.offset;
    const bool is_bias = p.name.ends_with(".bias");
    const bool is_ln_weight = !p.is_matrix && !is_bias;  // ln_*.weight
    // GPT-2 scales the projections that write into the residual stream.
    const bool residual_proj = p.name.ends_with("c_proj.weight");
    for (int64_t i = 0; i < n; ++i) {
      if (is_bias) dst[i] = 0.0f;
      else if (is_ln_weight) dst[i] = 1.0f;
      else if (p.name == "wpe.weight") dst[i] = 0.01f * rng.normal();
      else dst[i] = (residual_proj ? residual_std : 0.02f) * rng.normal();
    }
  }
  return out;
}

std::vector<uint8_t> gpt_decay_mask(const GptConfig& c, bool decay_embeddings) {
  std::vector<uint8_t> mask;
  mask.reserve(static_cast<size_t>(c.num_params()));
  for (const auto& p : GptLayout(c).tensors()) {
    const uint8_t decay = GptLayout::decays(p, decay_embeddings) ? 1 : 0;
    mask.insert(mask.end(), static_cast<size_t>(p.shape.numel()), decay);
  }
  return mask;
}

namespace {

// GPU ranks run tensor parallelism with data-parallel copies of the tensor group (dp x tp,
// the gradients summed over each data group, or with ZeRO-1 reduce-scattered into the
// optimiser state's shards), over NCCL, without ZeRO-2/3, pipeline stages or sequence
// parallelism.
void check_gpu_tensor_parallel(const GptConfig& c, const GptRunOptions& o) {
  parallel::ProcessGroups& g = *o.groups;
  const int tp = g.tensor().world();
  if (g.pipeline().world() > 1 || g.context().world() > 1)
    fail("parallel.tensor_parallel = {} on GPU ranks runs with data-parallel copies only (this "
         "job has {} pipeline stages and {} context ranks): set parallel.pipeline_parallel = 1",
         tp, g.pipeline().world(), g.context().world());
  if (!g.tensor().device_stream() || (g.data().world() > 1 && !g.data().device_stream()))
    fail("parallel.tensor_parallel = {} on GPU ranks sums the layers' outputs and the "
         "data-parallel copies' gradients on the GPU over NCCL; this run has the {} "
         "communicator: use parallel.communicator = \"nccl\" (or auto)", tp,
         g.tensor().backend());
  if (o.zero_stage > 1 || o.sequence_parallel)
    fail("parallel.tensor_parallel = {} on GPU ranks runs with ZeRO 0 or 1 and without sequence "
         "parallelism: set parallel.zero_stage = 0 or 1 and parallel.sequence_parallel = false "
         "(data-parallel copies of the tensor group shard at most the optimizer state)", tp);
  if (g.data().world() > 1 && (o.grad_comm != DType::f32 || o.grad_transport != "nccl"))
    fail("parallel.tensor_parallel = {} with {} data-parallel copies on GPU ranks sums the "
         "copies' gradients in fp32 over NCCL: set parallel.grad_comm = \"fp32\" and "
         "parallel.grad_transport = \"nccl\"", tp, g.data().world());
  if (c.n_head % tp != 0)
    fail("parallel.tensor_parallel = {} does not divide model.n_head = {}: each tensor rank "
         "holds whole attention heads; choose a tensor_parallel that divides {}", tp, c.n_head,
         c.n_head);
}

}  // namespace

std::unique_ptr<GptModel> make_gpt(const std::string& device, const GptConfig& c,
                                   const GptRunOptions& o) {
  if (o.zero_stage < 0 || o.zero_stage > 3)
    fail("parallel.zero_stage = {}: aiscale implements stages 0 to 3", o.zero_stage);
  if (o.zero_stage == 2 && device != "cpu")
    fail("parallel.zero_stage = 2 (ZeRO-2) is implemented for CPU ranks; GPU ranks run stages "
         "0, 1 and 3: set parallel.zero_stage to 1 (optimiser state sharded) or 3 (parameters "
         "and gradients too), or train.device = \"cpu\"");
  if (o.bucket_mib <= 0) fail("parallel.bucket_mib = {} must be positive", o.bucket_mib);
  const int world = o.comm ? o.comm->world() : 1;
  if (o.grad_comm != DType::f32 && o.grad_comm != DType::bf16)
    fail("parallel.grad_comm must be fp32 or bf16");
  if (o.grad_comm == DType::bf16 && world > 1 && (device != "cuda" || !o.comm->device_stream()))
    fail("parallel.grad_comm = \"bf16\" is implemented for GPU ranks over NCCL; this run has "
         "train.device = \"{}\" and the {} communicator: use parallel.grad_comm = \"fp32\"",
         device, o.comm->backend());
  if (o.attention != "auto" && o.attention != "cudnn" && o.attention != "flash" &&
      o.attention != "simple")
    fail("train.attention (--attention) = \"{}\": use auto, cudnn, flash or simple", o.attention);
  if (o.attention != "auto" && device != "cuda")
    fail("train.attention (--attention) = \"{}\" chooses GPU kernels; this run has device "
         "\"{}\": leave it at \"auto\" or run on cuda", o.attention, device);
  if (o.grad_transport != "nccl" && o.grad_transport != "copy-engine")
    fail("parallel.grad_transport = \"{}\": use nccl or copy-engine", o.grad_transport);
  if (o.grad_transport == "copy-engine" && world > 1 &&
      (device != "cuda" || !o.comm->device_stream()))
    fail("parallel.grad_transport = \"copy-engine\" moves GPU gradients between the GPUs of "
         "one node; this run has train.device = \"{}\" and the {} communicator: use "
         "parallel.grad_transport = \"nccl\"", device, o.comm->backend());
  if (o.zero_stage == 3 && world > 1 && device == "cuda" && !o.comm->device_stream())
    fail("parallel.zero_stage = 3 on GPU ranks gathers and reduces on the GPU over NCCL; this "
         "run has the {} communicator: use parallel.communicator = \"nccl\" (or auto)",
         o.comm->backend());
  if (o.zero_stage == 3 && device == "cuda" && (o.grad_comm != DType::f32 ||
                                                o.grad_transport != "nccl"))
    fail("parallel.zero_stage = 3 on GPU ranks reduces fp32 gradients over NCCL: set "
         "parallel.grad_comm = \"fp32\" and parallel.grad_transport = \"nccl\"");
  if (o.offload_optimizer && (device != "cuda" || o.zero_stage != 3))
    fail("parallel.offload_optimizer = true keeps ZeRO-3's optimizer state on the host of GPU "
         "ranks: set parallel.zero_stage = 3 and train.device = \"cuda\", or turn it off");
  if (o.zero_stage == 1 && world > 1) {
    if (device != "cuda" || !o.comm->device_stream())
      fail("parallel.zero_stage = 1 (ZeRO-1) is implemented for GPU ranks over NCCL; this run "
           "has train.device = \"{}\" and the {} communicator: use train.device = \"cuda\" "
           "with parallel.communicator = \"nccl\" (or auto), or parallel.zero_stage = 0",
           device, o.comm->backend());
    // Shard boundaries fall on multiples of the world size, each inside the bias of a
    // residual projection (n_embd values): see gpt_gradient_order in gpt_layout.h. (Under
    // tensor parallelism the data group shards one bucket: no such bound.)
    const bool tensor_parallel = o.groups && o.groups->tensor().world() > 1;
    if (!tensor_parallel && world > c.n_embd + 1)
      fail("parallel.zero_stage = 1 supports at most n_embd + 1 = {} ranks; this job has {}",
           c.n_embd + 1, world);
  }
  if (device == "cuda" && o.groups && o.groups->tensor().world() > 1) check_gpu_tensor_parallel(c, o);
  return device == "cuda" ? make_gpt_cuda(c, o) : make_gpt_cpu(c, o);
}

}  // namespace aiscale::nn
