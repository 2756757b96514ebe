// The CUDA GPT model's device memory: one cudaMalloc holding parameters, gradients,
// AdamW state, activations, scratch and the data-parallel reducer's buffers, and one
// pinned host staging area. Sized once at construction (allocate), so that a step
// allocates nothing. The model (gpt_cuda.cu) derives from this and uses the pointers.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace aiscale::nn::detail {

// What allocate() sizes for.
struct GptCudaSizes {
  int64_t B = 0, T = 0, C = 0, NH = 0, L = 0, V = 0, Vp = 0, N = 0;  // Vp: padded vocabulary
  // Tensor parallelism: this rank's attention width (its heads: NH is their number) and MLP
  // width; C and 4C with one tensor rank.
  int64_t Ca = 0, F = 0;
  // The fused QKV activations' width (3 Ca; the llama family's Q | K | V with fewer KV heads:
  // Ca + 2 KV rows) and the MLP's first output (F; llama's gate | up: 2F, F after SwiGLU).
  int64_t qkv = 0, fc_out = 0;
  // The llama family: the rotary table (fp32 values), and for grouped-query attention through
  // the own kernels two (N, 3 Ca) buffers of K and V expanded to every query head (0: none).
  int64_t rope_table = 0;
  bool gqa_expand = false;
  size_t es = 4;           // bytes per value of the run's dtype
  bool recompute = false;  // one shared buffer for ln1, ln2, GELU output of every layer
  bool recompute_layers = false;  // one set of every layer activation shared by the layers
  // The layers computed here (a pipeline stage's; default all): only they get activation
  // buffers (the others' entries alias the first's and are never used).
  int64_t layer_begin = 0, layer_end = -1;
  int64_t S = 0;           // master weights and moments (ZeRO-1: this rank's shard)
  int64_t Ppad = 0;        // gradients (rounded up to the ZeRO-1 world size)
  int64_t Pw = 0;          // working copy (with the padded vocabulary rows)
  size_t cudnn_workspace_bytes = 0;
  // Data parallelism.
  int64_t world = 1;
  bool gathered = false;       // every rank's tokens and d(res0) (overlapped)
  bool gathers_pushed = false; // d(res0) pushed by the copy engines: a buffer of its own
  bool zero = false;           // ZeRO-1: the flat working copy to gather into
  size_t buckets = 0;          // the reducer's buckets (a sum of squares each, ZeRO-1)
  size_t comm_buffer_bytes = 0;  // the reducer's bf16 bucket copies
  // ZeRO-3 and ZeRO-2 (nn/models/gpt_zero3.cuh): values of the resident units gathered (embeddings,
  // ln_f) and of one gathered layer (0 without them), and the gathered-layer buffers (2
  // rotating ones under ZeRO-3, one per layer under ZeRO-2).
  int64_t zero3_resident = 0, zero3_layer = 0, zero3_slots = 2;
  // Sequence parallelism (tensor parallelism with parallel.sequence_parallel): this rank's
  // rows of the residual stream (N / tp; 0: off), which then holds only them; a whole
  // (N, C) buffer for the row-parallel outputs and the gathered gradients, one for the
  // gathered final residual, and the LayerNorm gradients packed for their sum.
  int64_t sp_rows = 0;
  int64_t sp_ln_pack = 0;  // fp32 values
  // A vocabulary split over the tensor ranks: every rank's per-row softmax statistics
  // (tp x N x 3 fp32 values; 0: a whole vocabulary).
  int64_t xent_stats = 0;
};

class GptCudaMemory {
 protected:
  GptCudaMemory() = default;
  ~GptCudaMemory();
  GptCudaMemory(const GptCudaMemory&) = delete;
  GptCudaMemory& operator=(const GptCudaMemory&) = delete;

  // Throws Error (GPU out of memory, naming the size) when the allocation fails.
  void allocate(const GptCudaSizes& z);
  // Frees the device allocation (after everything that may still use it is done).
  void release();

  // Token positions grouped by id for the embedding backward: of this rank, or of every
  // rank when gathered.
  int64_t bucket_capacity() const { return bucket_capacity_; }
  size_t bucket_ints() const { return size_t(3 * bucket_capacity_ + 1); }

  struct Acts {
    // (N, C), (N, 3C), ... of t. The llama family: ln1 and ln2 are the RMSNorms' outputs
    // (their means unused), fc_pre the gate | up activations (N, 2F), fc_gelu SwiGLU's (N, F).
    void *ln1, *qkv, *atty, *res_mid, *ln2, *fc_pre, *fc_gelu;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;          // (N)
    float* lse;                                                // (B, NH, T)
  };

  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  void* gemm_workspace_ = nullptr;
  float *master_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  void* work_ = nullptr;
  std::vector<void*> residuals_;  // L + 1 buffers (N, C): embedding output, block outputs
  std::vector<Acts> acts_;
  void* lnf_ = nullptr;
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
  void* logits_ = nullptr;  // (N, Vp): logits, or dlogits after a fused forward
  float *losses_ = nullptr, *loss_dev_ = nullptr;
  void *dres_ = nullptr, *dln_ = nullptr, *datty_ = nullptr, *dqkv_ = nullptr, *dfc_ = nullptr;
  void* cudnn_workspace_ = nullptr;
  float *dq_accum_ = nullptr, *delta_ = nullptr, *bias_scratch_ = nullptr, *bias_tmp_ = nullptr;
  float *ln_scratch_ = nullptr, *logits_row_ = nullptr, *xent_stats_ = nullptr;
  double *sumsq_scratch_ = nullptr, *sumsq_dev_ = nullptr;
  int32_t *d_tokens_ = nullptr, *d_buckets_ = nullptr;

  void* host_staging_ = nullptr;
  int32_t *h_tokens_ = nullptr, *h_buckets_ = nullptr, *h_unique_ = nullptr,
          *h_offsets_ = nullptr, *h_positions_ = nullptr;
  float* h_loss_ = nullptr;
  double* h_sumsq_ = nullptr;
  std::vector<int32_t> bucket_counts_;
  // Buffers this model holds for the reducer's cooperation (allocate()).
  int32_t *tokens_all_ = nullptr, *h_tokens_all_ = nullptr;  // every rank's tokens
  void* dres_all_ = nullptr;  // (world x N, C) of t: every rank's d(res0)
  void* gather_ = nullptr;    // (Ppad) of t: flat working copy (ZeRO-1)
  void* comm_buf_ = nullptr;  // the reducer's bf16 copies of the buckets
  // ZeRO-3: the gathered embeddings and ln_f (t), two gathered layers (t), three layer
  // gradient buffers and the resident units' gradients (fp32).
  void* z3_resident_ = nullptr;
  void* z3_slots_ = nullptr;  // zero3_slots gathered layers, one after another
  float* z3_layer_grads_[3] = {nullptr, nullptr, nullptr};
  float* z3_resident_grads_ = nullptr;
  // Sequence parallelism: (N, C) of t each, and the packed LayerNorm gradients (fp32).
  void* sp_full_ = nullptr;
  void* sp_final_ = nullptr;
  float* sp_ln_pack_ = nullptr;
  // The llama family: the rotary table (gpt_rope.h) and the grouped-query scratch.
  float* rope_table_ = nullptr;
  void *gqa_full_ = nullptr, *gqa_dfull_ = nullptr;


 private:
  int64_t bucket_capacity_ = 0;
};

}  // namespace aiscale::nn::detail
