#include "aiscale/nn/models/gpt_cuda_memory.cuh"

#include <algorithm>
#include <string>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::nn::detail {
namespace {

// Bump allocator over one device allocation: first pass sizes, second pass hands out.
struct ArenaPlan {
  size_t total = 0;
  size_t add(size_t bytes) {
    const size_t off = total;
    total += (bytes + 255) / 256 * 256;
    return off;
  }
};

}  // namespace

GptCudaMemory::~GptCudaMemory() { release(); }

void GptCudaMemory::release() {
  if (arena_) cudaFree(arena_);
  if (host_staging_) cudaFreeHost(host_staging_);
  arena_ = nullptr;
  host_staging_ = nullptr;
}

void GptCudaMemory::allocate(const GptCudaSizes& z) {
  const bool gathered = z.gathered;
  bucket_capacity_ = gathered ? z.world * z.N : z.N;
  const int64_t N = z.N, C = z.C, L = z.L, Ca = z.Ca, Fm = z.F;
  const size_t e = z.es;
  const int64_t Wqkv = z.qkv > 0 ? z.qkv : 3 * Ca, Fo = z.fc_out > 0 ? z.fc_out : Fm;
  const bool rc = z.recompute;
  ArenaPlan plan;
  struct Off {
    size_t ln1, qkv, atty, res_mid, ln2, fc_pre, fc_gelu, ln1_mean, ln1_rstd, ln2_mean,
        ln2_rstd, lse;
  };
  // Master weights and moments: z.S values (P, or this rank's ZeRO-1 shard); gradients
  // z.Ppad (P rounded up to a multiple of the ZeRO-1 world size, the tail zero).
  const size_t o_master = plan.add(size_t(z.S) * 4), o_grads = plan.add(size_t(z.Ppad) * 4);
  const size_t o_m = plan.add(size_t(z.S) * 4), o_v = plan.add(size_t(z.S) * 4);
  const size_t o_work = plan.add(size_t(z.Pw) * e);
  const size_t o_ws = plan.add(cuda::Gemm::kWorkspaceBytes);
  // The residual stream: this rank's rows only under sequence parallelism.
  const int64_t R = z.sp_rows > 0 ? z.sp_rows : N;
  std::vector<size_t> o_res;
  for (int64_t l = 0; l <= L; ++l) o_res.push_back(plan.add(size_t(R * C) * e));
  const size_t shared_ln1 = rc ? plan.add(size_t(N * C) * e) : 0;
  const size_t shared_ln2 = rc ? plan.add(size_t(N * C) * e) : 0;
  const size_t shared_gelu = rc ? plan.add(size_t(N * Fm) * e) : 0;
  std::vector<Off> off(static_cast<size_t>(L));
  const int64_t lb = z.layer_begin, le = z.layer_end < 0 ? L : z.layer_end;
  for (int64_t l = lb; l < le; ++l) {
    Off& x = off[static_cast<size_t>(l)];
    // Full recomputation: the first layer's set serves every layer (the residual stream
    // between the layers, o_res, stays whole).
    if (z.recompute_layers && l != lb) {
      x = off[static_cast<size_t>(lb)];
      continue;
    }
    x.ln1 = rc ? shared_ln1 : plan.add(size_t(N * C) * e);
    x.qkv = plan.add(size_t(N * Wqkv) * e);
    x.atty = plan.add(size_t(N * Ca) * e);
    x.res_mid = plan.add(size_t(R * C) * e);
    x.ln2 = rc ? shared_ln2 : plan.add(size_t(N * C) * e);
    x.fc_pre = plan.add(size_t(N * Fo) * e);
    x.fc_gelu = rc ? shared_gelu : plan.add(size_t(N * Fm) * e);
    x.ln1_mean = plan.add(size_t(N) * 4);
    x.ln1_rstd = plan.add(size_t(N) * 4);
    x.ln2_mean = plan.add(size_t(N) * 4);
    x.ln2_rstd = plan.add(size_t(N) * 4);
    x.lse = plan.add(size_t(z.B * z.NH * z.T) * 4);
  }
  for (int64_t l = 0; l < L; ++l)  // another stage's layers: never computed here
    if (l < lb || l >= le) off[static_cast<size_t>(l)] = off[static_cast<size_t>(lb)];
  const size_t o_lnf = plan.add(size_t(N * C) * e);
  const size_t o_lnf_mean = plan.add(size_t(N) * 4), o_lnf_rstd = plan.add(size_t(N) * 4);
  const size_t o_logits = plan.add(size_t(N * z.Vp) * e);
  const size_t o_losses = plan.add(size_t(N) * 4), o_loss = plan.add(4);
  const size_t o_dres = plan.add(size_t(N * C) * e), o_dln = plan.add(size_t(N * C) * e);
  const size_t o_datty = plan.add(size_t(N * Ca) * e);
  const size_t o_dqkv = plan.add(size_t(N * Wqkv) * e);
  const size_t o_dfc = plan.add(size_t(N * Fo) * e);
  const size_t o_dq = plan.add(size_t(N * Ca) * 4);
  const size_t o_delta = plan.add(size_t(z.B * z.NH * z.T) * 4);
  const size_t o_cudnn_ws =
      plan.add(std::max<size_t>(16, z.cudnn_workspace_bytes));
  const size_t o_bias_scratch = plan.add(cuda::bias_grad_scratch_floats(4 * C) * 4);
  const size_t o_bias_tmp = plan.add(size_t(4 * C) * 4);
  const size_t o_ln_scratch = plan.add(cuda::layernorm_backward_scratch_floats(N, C) * 4);
  const size_t o_sumsq_scratch = plan.add(cuda::sum_squares_scratch_doubles() * 8);
  // Per bucket (ZeRO-1) or per rank and the embeddings (the fused norm).
  const size_t n_sumsq = std::max<size_t>({1, z.buckets, size_t(z.world) + 1});
  const size_t o_sumsq = plan.add(8 * n_sumsq);
  const size_t o_tokens = plan.add(size_t(2 * N) * 4);
  // Data parallelism: every rank's tokens and d(res0) (overlapped), the flat working copy
  // (ZeRO-1). The last two live in the logits buffer when it is large enough: d(res0) is
  // gathered after the LM head's backward has read dlogits (every rank's: NCCL's
  // all-gather and the copy engines' handshake wait for each rank's end of backward), the
  // working copy between the update and the next forward. Not so d(res0) pushed by the
  // copy engines: a rank pushes its part into the peers' buffers as soon as its own
  // backward ends, which may be before a slower peer's LM head has read its dlogits; it
  // gets a buffer of its own (its readers, the embedding backwards, are done before the
  // step's host-level loss all-reduce, which every rank passes before its next push).
  const size_t logits_bytes = size_t(N * z.Vp) * e;
  const size_t dres_all_bytes = gathered ? size_t(z.world * N * C) * e : 0;
  const size_t gather_bytes = z.zero ? size_t(z.Ppad) * e : 0;
  // bf16 gradient communication: the buckets' bf16 copies, alive from the LM head's
  // backward (after it has read dlogits) to the end of backward, beside d(res0).
  const size_t comm_buf_bytes = z.comm_buffer_bytes;
  const bool dres_pushed = z.gathers_pushed;
  const bool dres_in_logits = dres_all_bytes && !dres_pushed && comm_buf_bytes + dres_all_bytes <= logits_bytes;
  const bool comm_buf_in_logits =
      comm_buf_bytes && comm_buf_bytes + (dres_in_logits ? dres_all_bytes : 0) <= logits_bytes;
  const size_t o_tokens_all = gathered ? plan.add(size_t(z.world * N) * 4) : 0;
  const size_t o_comm_buf = comm_buf_bytes && !comm_buf_in_logits ? plan.add(comm_buf_bytes) : 0;
  const size_t o_dres_all = dres_all_bytes && !dres_in_logits ? plan.add(dres_all_bytes) : 0;
  const size_t o_gather = gather_bytes > logits_bytes ? plan.add(gather_bytes) : 0;
  const bool z3 = z.zero3_layer > 0;
  const size_t o_z3_resident = z3 ? plan.add(size_t(z.zero3_resident) * e) : 0;
  size_t o_z3_slots = 0, o_z3_grads[3] = {0, 0, 0};
  if (z3) {
    o_z3_slots = plan.add(size_t(z.zero3_slots * z.zero3_layer) * e);
    for (auto& o : o_z3_grads) o = plan.add(size_t(z.zero3_layer) * 4);
  }
  const size_t o_z3_resident_grads = z3 ? plan.add(size_t(z.zero3_resident) * 4) : 0;
  const bool sp = z.sp_rows > 0;
  const size_t o_sp_full = sp ? plan.add(size_t(N * C) * e) : 0;
  const size_t o_sp_final = sp ? plan.add(size_t(N * C) * e) : 0;
  const size_t o_sp_pack = sp ? plan.add(size_t(z.sp_ln_pack) * 4) : 0;
  const size_t o_xent_stats = z.xent_stats ? plan.add(size_t(z.xent_stats) * 4) : 0;
  const size_t o_rope = z.rope_table ? plan.add(size_t(z.rope_table) * 4) : 0;
  const size_t o_gqa = z.gqa_expand ? plan.add(size_t(N * 3 * Ca) * e) : 0;
  const size_t o_gqa_d = z.gqa_expand ? plan.add(size_t(N * 3 * Ca) * e) : 0;
  const size_t o_buckets = plan.add(bucket_ints() * 4);
  const size_t o_logits_row = plan.add(size_t(z.Vp) * 4);

  arena_bytes_ = plan.total;
  cudaError_t err = cudaMalloc(&arena_, arena_bytes_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("GPU out of memory: the model needs " + std::to_string(arena_bytes_ >> 20) +
                " MiB, " + std::to_string(free_b >> 20) +
                " MiB are free: lower the batch size or enable recomputation");
  }
  char* base = static_cast<char*>(arena_);
  auto F = [&](size_t o) { return reinterpret_cast<float*>(base + o); };
  auto X = [&](size_t o) { return static_cast<void*>(base + o); };
  master_ = F(o_master);
  grads_ = F(o_grads);
  m_ = F(o_m);
  v_ = F(o_v);
  work_ = X(o_work);
  gemm_workspace_ = X(o_ws);
  for (size_t o : o_res) residuals_.push_back(X(o));
  acts_.resize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    const Off& x = off[static_cast<size_t>(l)];
    acts_[static_cast<size_t>(l)] =
        Acts{X(x.ln1),      X(x.qkv),      X(x.atty),     X(x.res_mid),
             X(x.ln2),      X(x.fc_pre),   X(x.fc_gelu),  F(x.ln1_mean),
             F(x.ln1_rstd), F(x.ln2_mean), F(x.ln2_rstd), F(x.lse)};
  }
  lnf_ = X(o_lnf);
  lnf_mean_ = F(o_lnf_mean);
  lnf_rstd_ = F(o_lnf_rstd);
  logits_ = X(o_logits);
  losses_ = F(o_losses);
  loss_dev_ = F(o_loss);
  dres_ = X(o_dres);
  dln_ = X(o_dln);
  datty_ = X(o_datty);
  dqkv_ = X(o_dqkv);
  dfc_ = X(o_dfc);
  dq_accum_ = F(o_dq);
  delta_ = F(o_delta);
  cudnn_workspace_ = base + o_cudnn_ws;
  bias_scratch_ = F(o_bias_scratch);
  bias_tmp_ = F(o_bias_tmp);
  ln_scratch_ = F(o_ln_scratch);
  sumsq_scratch_ = reinterpret_cast<double*>(base + o_sumsq_scratch);
  sumsq_dev_ = reinterpret_cast<double*>(base + o_sumsq);
  d_tokens_ = reinterpret_cast<int32_t*>(base + o_tokens);
  if (gathered) tokens_all_ = reinterpret_cast<int32_t*>(base + o_tokens_all);
  if (comm_buf_bytes) comm_buf_ = comm_buf_in_logits ? logits_ : X(o_comm_buf);
  if (dres_all_bytes)
    dres_all_ = dres_in_logits ? static_cast<char*>(logits_) + comm_buf_bytes : X(o_dres_all);
  if (z.zero) gather_ = o_gather ? X(o_gather) : logits_;
  if (z3) {
    z3_resident_ = X(o_z3_resident);
    z3_slots_ = X(o_z3_slots);
    for (int i = 0; i < 3; ++i) z3_layer_grads_[i] = F(o_z3_grads[i]);
    z3_resident_grads_ = F(o_z3_resident_grads);
  }
  if (sp) {
    sp_full_ = X(o_sp_full);
    sp_final_ = X(o_sp_final);
    sp_ln_pack_ = F(o_sp_pack);
  }
  if (z.xent_stats) xent_stats_ = F(o_xent_stats);
  if (z.rope_table) rope_table_ = F(o_rope);
  if (z.gqa_expand) {
    gqa_full_ = X(o_gqa);
    gqa_dfull_ = X(o_gqa_d);
  }
  d_buckets_ = reinterpret_cast<int32_t*>(base + o_buckets);
  logits_row_ = F(o_logits_row);

  // Pinned host staging: tokens + targets, buckets, every rank's tokens, sums of squares,
  // loss.
  const int64_t Nb = bucket_capacity();
  const size_t tokens_all_bytes = gathered ? size_t(z.world * N) * 4 : 0;
  const size_t host_bytes =
      size_t(2 * N) * 4 + bucket_ints() * 4 + tokens_all_bytes + 8 * n_sumsq + 64;
  AISCALE_CUDA_CHECK(cudaMallocHost(&host_staging_, host_bytes));
  char* h = static_cast<char*>(host_staging_);
  h_tokens_ = reinterpret_cast<int32_t*>(h);
  h_buckets_ = reinterpret_cast<int32_t*>(h + size_t(2 * N) * 4);
  h_unique_ = h_buckets_;
  h_offsets_ = h_buckets_ + Nb;
  h_positions_ = h_buckets_ + 2 * Nb + 1;
  char* tail = h + size_t(2 * N) * 4 + bucket_ints() * 4;
  if (gathered) {
    h_tokens_all_ = reinterpret_cast<int32_t*>(tail);
    tail += tokens_all_bytes;
  }
  tail += (8 - reinterpret_cast<uintptr_t>(tail) % 8) % 8;
  h_sumsq_ = reinterpret_cast<double*>(tail);
  h_loss_ = reinterpret_cast<float*>(tail + 8 * n_sumsq);
  bucket_counts_.reserve(static_cast<size_t>(z.V));
}

}  // namespace aiscale::nn::detail
