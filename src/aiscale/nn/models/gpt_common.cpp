// Parts of the GPT model shared by every backend: initialisation and decay mask.
#include <algorithm>
#include <cmath>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/process_groups.h"

namespace aiscale::nn {

// The draws: biases are 0, LayerNorm weights 1, every other value one normal from one
// stream, in layout order. Normal k of the stream is the cosine (k even) or sine (k odd)
// half of Box-Muller pair k/2, made from uniforms 2(k/2) and 2(k/2)+1, exactly as
// Rng::normal() draws them one by one. The uniforms come from the generator serially (a
// few ns each) a block at a time, and the logarithms and sines (most of the time: ~2 min
// for GPT-2 6.6B on one core) are taken in parallel; the values are the same bits.
void gpt_init_ranges(const GptConfig& c, uint64_t seed, const GptInitSink& put) {
  // Where each value goes and its scale, for the values that draw a normal.
  struct Span {
    int64_t offset, n;
    float scale;
  };
  std::vector<Span> spans;
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  constexpr int64_t kFillBlock = int64_t{1} << 20;
  std::vector<float> fill;
  for (const auto& p : GptLayout(c).tensors()) {
    const int64_t n = p.shape.numel();
    const bool is_bias = p.name.ends_with(".bias");
    const bool is_ln_weight = !p.is_matrix && !is_bias;  // ln_*.weight, *norm.weight
    // GPT-2 scales the projections that write into the residual stream (the llama family's
    // o_proj and down_proj alike).
    const bool residual_proj = p.name.ends_with("c_proj.weight") ||
                               p.name.ends_with("o_proj.weight") ||
                               p.name.ends_with("down_proj.weight");
    if (is_bias || is_ln_weight) {
      fill.assign(static_cast<size_t>(std::min(n, kFillBlock)), is_bias ? 0.0f : 1.0f);
      for (int64_t at = 0; at < n; at += kFillBlock) put(p.offset + at, std::min(kFillBlock, n - at), fill.data());
      continue;
    }
    spans.push_back({p.offset, n, p.name == "wpe.weight" ? 0.01f : residual_proj ? residual_std : 0.02f});
  }
  Rng rng(seed);
  int64_t left = 0;  // normals still wanted
  for (const Span& sp : spans) left += sp.n;
  // Box-Muller pairs per block (fewer for a small model: its buffers no larger than it).
  const int64_t pairs_per_block = std::min(int64_t{1} << 22, (left + 1) / 2);
  std::vector<float> uniforms(size_t(2 * pairs_per_block)), normals(size_t(2 * pairs_per_block));
  size_t span = 0;
  int64_t at = 0;  // values of spans[span] written
  while (left > 0) {
    const int64_t pairs = std::min(pairs_per_block, (left + 1) / 2);
    left -= std::min(left, 2 * pairs);
    for (int64_t i = 0; i < 2 * pairs; ++i) uniforms[size_t(i)] = rng.uniform();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < pairs; ++i) {
      float u1 = uniforms[size_t(2 * i)];
      const float u2 = uniforms[size_t(2 * i + 1)];
      if (u1 < 1e-12f) u1 = 1e-12f;
      const float r = std::sqrt(-2.0f * std::log(u1));
      const float th = 6.28318530717958647692f * u2;
      normals[size_t(2 * i)] = r * std::cos(th);
      normals[size_t(2 * i + 1)] = r * std::sin(th);
    }
    // Hand the block's normals out in order. An odd total leaves the last sine unused,
    // as Rng::normal() would keep it as its spare: the stream ends there.
    int64_t k = 0;
    while (k < 2 * pairs && span < spans.size()) {
      Span& sp = spans[span];
      const int64_t take = std::min(sp.n - at, 2 * pairs - k);
      float* v = normals.data() + k;
      for (int64_t i = 0; i < take; ++i) v[i] *= sp.scale;
      put(sp.offset + at, take, v);
      k += take;
      at += take;
      if (at == sp.n) ++span, at = 0;
    }
  }
}

std::vector<float> gpt_init_params(const GptConfig& c, uint64_t seed) {
  std::vector<float> out(static_cast<size_t>(c.num_params()));
  gpt_init_ranges(c, seed, [&](int64_t begin, int64_t count, const float* values) {
    std::copy(values, values + count, out.begin() + begin);
  });
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

// A setter's range into `pending` (the whole vector, sized by the range that starts it).
void stage_range(std::vector<float>& pending, int64_t total, int64_t begin, int64_t count,
                 const float* in) {
  AISCALE_CHECK(begin >= 0 && count >= 0 && begin + count <= total,
                "range [{}, {}) outside a model of {} values", begin, begin + count, total);
  if (begin == 0) pending.assign(static_cast<size_t>(total), 0.0f);
  AISCALE_CHECK(static_cast<int64_t>(pending.size()) == total,
                "state ranges must be set in ascending order from 0");
  std::copy(in, in + count, pending.begin() + begin);
}

}  // namespace

void GptModel::get_params_range(int64_t begin, int64_t count, float* out) const {
  std::vector<float> whole(static_cast<size_t>(num_params()));
  get_params(whole.data());
  std::copy(whole.begin() + begin, whole.begin() + begin + count, out);
}

void GptModel::set_params_range(int64_t begin, int64_t count, const float* in) {
  stage_range(pending_params_, num_params(), begin, count, in);
  if (begin + count < num_params()) return;
  set_params(pending_params_.data());
  pending_params_ = {};
}

void GptModel::get_optimizer_state_range(int k, int64_t begin, int64_t count, float* out) const {
  const size_t n = static_cast<size_t>(num_params());
  std::vector<float> m(n), v(n);
  get_optimizer_state(m.data(), v.data());
  const std::vector<float>& whole = k == 0 ? m : v;
  std::copy(whole.begin() + begin, whole.begin() + begin + count, out);
}

void GptModel::set_optimizer_state_range(int k, int64_t begin, int64_t count, const float* in) {
  stage_range(k == 0 ? pending_m_ : pending_v_, num_params(), begin, count, in);
  if (k == 0 || begin + count < num_params()) return;
  AISCALE_CHECK(static_cast<int64_t>(pending_m_.size()) == num_params(),
                "the first moment's ranges must be set before the second's");
  set_optimizer_state(pending_m_.data(), pending_v_.data());
  pending_m_ = {};
  pending_v_ = {};
}

const std::vector<ParamTensor>& GptModel::param_tensors() const {
  if (!tensors_.empty()) return tensors_;
  for (const auto& p : GptLayout(config()).tensors()) {
    ParamTensor t;
    t.name = p.name;
    for (int i = 0; i < p.shape.ndim; ++i) t.shape.push_back(p.shape[i]);
    t.offset = p.offset;
    t.size = p.shape.numel();
    t.decay = GptLayout::decays(p, options().decay_embeddings);
    tensors_.push_back(std::move(t));
  }
  return tensors_;
}

size_t GptModel::activation_bytes() const {
  const size_t held = size_t(8) * size_t(num_params()) + optimizer_state_bytes();
  return memory_bytes() > held ? memory_bytes() - held : 0;
}

namespace {

// GPU ranks run neither tensor nor pipeline parallelism (`key` = `size`) with context
// parallelism.
void refuse_context_parallelism(parallel::ProcessGroups& g, const char* key, int size) {
  if (g.context().world() > 1)
    fail("{} = {} on GPU ranks does not run with context parallelism (this job has {} context "
         "ranks)", key, size, g.context().world());
}

// GPU ranks run tensor parallelism with data-parallel copies of the tensor group (dp x tp,
// the gradients summed over each data group, with ZeRO-1 reduce-scattered into the
// optimiser state's shards, with ZeRO-2/3 each rank's slices sharded over its data group)
// and inside pipeline stages (dp x tp x pp, ZeRO 0 or 1), over the device collectives of
// NCCL, or of MPI or TCP staged through host memory; not with the optimizer state on the
// host.
void check_gpu_tensor_parallel(const GptConfig& c, const GptRunOptions& o) {
  parallel::ProcessGroups& g = *o.groups;
  const int tp = g.tensor().world();
  refuse_context_parallelism(g, "parallel.tensor_parallel", tp);
  if (!g.tensor().device_stream() || (g.data().world() > 1 && !g.data().device_stream()))
    fail("parallel.tensor_parallel = {} on GPU ranks sums the layers' outputs and the "
         "data-parallel copies' gradients with device collectives, which the {} communicator "
         "lacks: use parallel.communicator = \"nccl\", \"mpi\" or \"tcp\" (or auto)", tp,
         g.tensor().backend());
  if (o.offload_optimizer)
    fail("parallel.offload_optimizer = true does not run with parallel.tensor_parallel = {} on "
         "GPU ranks: set parallel.offload_optimizer = false, or parallel.tensor_parallel = 1",
         tp);
  if (o.sequence_parallel && o.recompute && !o.recompute_layers)
    fail("parallel.sequence_parallel = true on GPU ranks does not run with train.recompute (the "
         "LayerNorm and GELU outputs recomputed): set train.recompute = false, or "
         "train.recompute_layers = true to recompute whole layers");
  if (g.data().world() > 1 && (o.grad_comm != DType::f32 || o.grad_transport == "copy-engine"))
    fail("parallel.tensor_parallel = {} with {} data-parallel copies on GPU ranks sums the "
         "copies' gradients in fp32 with the communicator's own collectives: set "
         "parallel.grad_comm = \"fp32\" and parallel.grad_transport = \"nccl\"", tp,
         g.data().world());
  if (c.n_head % tp != 0)
    fail("parallel.tensor_parallel = {} does not divide model.n_head = {}: each tensor rank "
         "holds whole attention heads; choose a tensor_parallel that divides {}", tp, c.n_head,
         c.n_head);
}

// GPU ranks run pipeline stages (gpt_cuda_pp.cuh) with data-parallel copies of the
// pipeline and tensor parallelism inside each stage (dp x tp x pp), ZeRO 0 or 1, over the
// device collectives (NCCL, or MPI or TCP staged through host memory); not with context
// parallelism.
void check_gpu_pipeline(const GptConfig& c, const GptRunOptions& o) {
  parallel::ProcessGroups& g = *o.groups;
  const int pp = g.pipeline().world();
  refuse_context_parallelism(g, "parallel.pipeline_parallel", pp);
  if (!g.pipeline().device_stream() || (o.comm && o.comm->world() > 1 && !o.comm->device_stream()))
    fail("parallel.pipeline_parallel = {} on GPU ranks sends the activations between stages and "
         "sums the gradients with device collectives, which the {} communicator lacks: use "
         "parallel.communicator = \"nccl\", \"mpi\" or \"tcp\" (or auto)", pp,
         g.pipeline().backend());
  if (o.zero_stage > 1 || o.offload_optimizer)
    fail("parallel.pipeline_parallel = {} on GPU ranks runs with ZeRO 0 or 1 (the stage's "
         "data-parallel copies shard at most its optimizer state): set parallel.zero_stage = 0 "
         "or 1 and parallel.offload_optimizer = false", pp);
  if (o.grad_comm != DType::f32 || o.grad_transport == "copy-engine")
    fail("parallel.pipeline_parallel = {} on GPU ranks sums the stages' gradients in fp32 with "
         "the communicator's own collectives: set parallel.grad_comm = \"fp32\" and "
         "parallel.grad_transport = \"nccl\"", pp);
  if (o.microbatches < 1 || o.batch % o.microbatches)
    fail("parallel.microbatches = {} must divide the batch of {} rows", o.microbatches, o.batch);
  if (pp > c.n_layer)
    fail("{} pipeline stages for {} layers: at most one stage per layer", pp, c.n_layer);
  if (o.pipeline_schedule != "gpipe" && o.pipeline_schedule != "1f1b")
    fail("parallel.pipeline_schedule = \"{}\": use gpipe or 1f1b", o.pipeline_schedule);
}

}  // namespace

std::unique_ptr<GptModel> make_gpt(const std::string& device, const GptConfig& c,
                                   const GptRunOptions& o) {
  if (o.zero_stage < 0 || o.zero_stage > 3)
    fail("parallel.zero_stage = {}: aiscale implements stages 0 to 3", o.zero_stage);
  if (o.bucket_mib <= 0) fail("parallel.bucket_mib = {} must be positive", o.bucket_mib);
  const int world = o.comm ? o.comm->world() : 1;
  if (o.grad_comm != DType::f32 && o.grad_comm != DType::bf16)
    fail("parallel.grad_comm must be fp32 or bf16");
  if (o.grad_comm == DType::bf16 && world > 1 && (device != "cuda" || !o.comm->device_stream()))
    fail("parallel.grad_comm = \"bf16\" is implemented for GPU ranks (over NCCL, MPI or TCP); "
         "this run has train.device = \"{}\" and the {} communicator: use parallel.grad_comm = "
         "\"fp32\"", device, o.comm->backend());
  if (o.attention != "auto" && o.attention != "cudnn" && o.attention != "flash" &&
      o.attention != "simple")
    fail("train.attention (--attention) = \"{}\": use auto, cudnn, flash or simple", o.attention);
  if (o.attention != "auto" && device != "cuda")
    fail("train.attention (--attention) = \"{}\" chooses GPU kernels; this run has device "
         "\"{}\": leave it at \"auto\" or run on cuda", o.attention, device);
  if (o.grad_transport != "auto" && o.grad_transport != "nccl" && o.grad_transport != "copy-engine")
    fail("parallel.grad_transport = \"{}\": use auto, nccl or copy-engine", o.grad_transport);
  // The copy engines map the peers' GPU memory beside NCCL ranks, one GPU each; GPU ranks
  // over MPI or TCP stage through host memory (on_device() false) and may share a GPU.
  if (o.grad_transport == "copy-engine" && world > 1 &&
      (device != "cuda" || !o.comm->device_stream() || !o.comm->on_device()))
    fail("parallel.grad_transport = \"copy-engine\" moves GPU gradients between the GPUs of "
         "one node beside NCCL; this run has train.device = \"{}\" and the {} communicator: "
         "use parallel.grad_transport = \"nccl\" (the communicator's own collectives) or "
         "\"auto\", or parallel.communicator = \"nccl\"", device, o.comm->backend());
  if (o.zero_stage >= 2 && world > 1 && device == "cuda" && !o.comm->device_stream())
    fail("parallel.zero_stage = {} on GPU ranks gathers and reduces with device collectives, "
         "which the {} communicator lacks: use parallel.communicator = \"nccl\", \"mpi\" or "
         "\"tcp\" (or auto)", o.zero_stage, o.comm->backend());
  if (o.zero_stage >= 2 && device == "cuda" && (o.grad_comm != DType::f32 ||
                                                o.grad_transport == "copy-engine"))
    fail("parallel.zero_stage = {} on GPU ranks reduces fp32 gradients with the communicator's "
         "own collectives: set parallel.grad_comm = \"fp32\" and parallel.grad_transport = "
         "\"nccl\"", o.zero_stage);
  if (o.offload_optimizer && (device != "cuda" || o.zero_stage != 3))
    fail("parallel.offload_optimizer = true keeps ZeRO-3's optimizer state on the host of GPU "
         "ranks: set parallel.zero_stage = 3 and train.device = \"cuda\", or turn it off");
  if (o.zero_stage == 1 && world > 1) {
    if (device != "cuda" || !o.comm->device_stream())
      fail("parallel.zero_stage = 1 (ZeRO-1) is implemented for GPU ranks; this run has "
           "train.device = \"{}\" and the {} communicator: use train.device = \"cuda\" with "
           "parallel.communicator = \"nccl\", \"mpi\" or \"tcp\" (or auto), or "
           "parallel.zero_stage = 0", device, o.comm->backend());
    // Shard boundaries fall on multiples of the world size, each inside the bias of a
    // residual projection (n_embd values): see gpt_gradient_order in gpt_layout.h. (Under
    // tensor or pipeline parallelism the data group shards one bucket: no such bound.)
    const bool one_bucket = o.groups && (o.groups->tensor().world() > 1 ||
                                         o.groups->pipeline().world() > 1);
    if (!one_bucket && world > c.n_embd + 1)
      fail("parallel.zero_stage = 1 supports at most n_embd + 1 = {} ranks; this job has {}",
           c.n_embd + 1, world);
  }
  if (c.llama() && device == "cuda" && o.groups && o.groups->tensor().world() > 1) {
    const int tp = o.groups->tensor().world();
    if (c.kv_heads() % tp != 0)
      fail("parallel.tensor_parallel = {} does not divide the {} key/value heads "
           "(model.n_kv_head): each tensor rank holds whole KV heads; choose a tensor_parallel "
           "that divides them", tp, c.kv_heads());
    if (c.ffn() % tp != 0)
      fail("parallel.tensor_parallel = {} does not divide model.ffn_hidden = {}: choose a "
           "tensor_parallel that divides it", tp, c.ffn());
  }
  if (device == "cuda" && o.groups && o.groups->tensor().world() > 1) check_gpu_tensor_parallel(c, o);
  if (device == "cuda" && o.groups && o.groups->pipeline().world() > 1) check_gpu_pipeline(c, o);
  return device == "cuda" ? make_gpt_cuda(c, o) : make_gpt_cpu(c, o);
}

}  // namespace aiscale::nn
