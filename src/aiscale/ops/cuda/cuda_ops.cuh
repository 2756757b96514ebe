// The CUDA ops of the GPT path, callable from host code (.cpp or .cu). Every function
// takes device pointers, an element type for the activations (fp32, bf16 or fp16: `DType
// t`) and a stream, and launches asynchronously. Math is fp32 inside every kernel;
// parameter gradients, LayerNorm statistics, losses and attention statistics are fp32.
//
// Layouts follow ops.h (row-major; N = B*T rows, C channels, OC output channels, V
// vocabulary, NH heads). Backward conventions as in ops.h: parameter gradients
// accumulate (+=), activation gradients overwrite unless `accumulate` says otherwise.
// These are the CUDA backend's entries for the ops of the vocabulary (ops/op.h); which op
// and dtype each covers is its coverage table (coverage.cpp), and every one is checked
// against the CPU reference by tests/ops (`test_ops test --backend cuda`).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/ops/fp8.h"
#include "aiscale/ops/ops.h"

namespace aiscale::cuda {

// ---------------------------------------------------------------------------------------
// GEMM through cuBLASLt (matmul.cu)

enum class Epilogue : uint8_t {
  none,
  bias,           // D = AB (+ beta C) + bias (bias length m)
  gelu_aux_bias,  // aux = AB + bias; D = gelu_tanh(aux)
  dgelu,          // D = AB * gelu'(aux)
  dgelu_bgrad,    // D = AB * gelu'(aux); bias = row sums of D (length m, fp32)
  bgradb,         // D = AB (+ beta C); bias = sums of op(B) over k (length n, fp32)
};

// One call as cuBLASLt sees it (column-major): D (m x n, ldd) = alpha op(A) op(B) + beta C.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  const void* c = nullptr;  // read when beta != 0; may equal d
  int64_t ldc = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  DType ab_type = DType::bf16;  // element type of A and B
  DType cd_type = DType::bf16;  // element type of C and D
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::none;
  void* bias = nullptr;  // bias (ab_type, read) or bias gradient (fp32, written)
  void* aux = nullptr;   // GELU pre-activation (cd_type), ld_aux
  int64_t ld_aux = 0;
  // FP8 operands (sm_89 and newer; ops/cuda/fp8.cuh): A and B hold codes of a_format and
  // b_format instead of ab_type, dequantised by the device floats *a_scale and *b_scale;
  // fast_accum: the tensor cores' faster, less exact accumulation (forward passes).
  bool fp8 = false, fast_accum = false;
  ops::Fp8Format a_format = ops::Fp8Format::e4m3, b_format = ops::Fp8Format::e4m3;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
};

// cuBLASLt handle, plan cache and a caller-owned workspace (no allocation per call).
class Gemm {
 public:
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // Runs the call; returns false (and runs nothing) when cuBLASLt has no algorithm for it.
  bool run(const GemmCall& call, cudaStream_t stream);
  // Whether cuBLASLt has an algorithm for this call (plans and caches it).
  bool supported(const GemmCall& call);
  // One line per cached plan (shape, types, epilogue, whether cuBLASLt had an algorithm).
  std::string summary() const;
  // While on, the first run of each new plan times cuBLASLt's top candidates on the call's
  // own buffers and keeps the fastest. That runs the call several times, so switch it on
  // only where repeating a call is harmless (GEMMs accumulating into C are run extra
  // times: the model does this in a warm-up step and zeroes the gradients after it).
  void set_autotune(bool on);
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

 private:
  struct Impl;
  Impl* impl_;
};

// Row-major linear layers on top of Gemm, with fallbacks to plain kernels where a fused
// cuBLASLt epilogue is unavailable (or disabled by `allow_fused_*` for measurements).
struct LinearOptions {
  bool fused_gelu = true;    // GELU (+ pre-activation) in the forward GEMM's epilogue
  bool fused_dgelu = false;  // dGELU in the backward GEMM's epilogue (else: plain GEMM, then
                             // one kernel for dGELU and the bias gradient; faster on H200)
  bool fused_bgrad = true;   // bias gradients in the GEMM epilogue
};

// out (N, OC) = inp (N, C) @ weight (OC, C)^T [+ bias (OC)] [+ residual (N, OC)].
// With pre_gelu non-null: pre_gelu = inp @ weight^T + bias and out = gelu(pre_gelu)
// (residual must be null then).
void linear_forward(Gemm& g, DType t, void* out, void* pre_gelu, const void* inp,
                    const void* weight, const void* bias, const void* residual, int64_t N,
                    int64_t C, int64_t OC, const LinearOptions& o, cudaStream_t s);

// dinp (N, C) = alpha * dout (N, OC) @ weight (OC, C), overwritten. ld_dout >= OC.
// With gelu_pre (N, C) non-null: dinp is multiplied by gelu'(gelu_pre) (the GELU before
// this layer), and if dbias_gelu (C, fp32) is non-null it receives (overwrites) the
// column sums of the result (the bias gradient of the layer that produced gelu_pre).
// bias_scratch: fp32 scratch of bias_grad_scratch_floats(C) values (fallback path).
void linear_backward_input(Gemm& g, DType t, void* dinp, const void* dout, const void* weight,
                           int64_t N, int64_t C, int64_t OC, int64_t ld_dout, float alpha,
                           const void* gelu_pre, float* dbias_gelu, float* bias_scratch,
                           const LinearOptions& o, cudaStream_t s);

// dweight (OC, C) fp32 += alpha * dout^T @ inp, over the first OC columns of dout
// (N, ld_dout). If dbias (OC, fp32) is non-null it receives (overwrites) the column sums
// of dout (requires alpha == 1).
void linear_backward_weight(Gemm& g, DType t, float* dweight, float* dbias, const void* dout,
                            const void* inp, int64_t N, int64_t C, int64_t OC, int64_t ld_dout,
                            float alpha, float* bias_scratch, const LinearOptions& o,
                            cudaStream_t s);

// ---------------------------------------------------------------------------------------
// Elementwise and small ops (elementwise.cu)

// out (B, T, C) = wte[tokens] + wpe[t]. tokens (B, T) on the device. A slice of the
// vocabulary (tensor parallelism): wte holds the rows of token ids [vocab_begin,
// vocab_begin + vocab_rows), other tokens add zeros; wpe null: no position embedding added.
void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte,
                       const void* wpe, int64_t B, int64_t T, int64_t C, cudaStream_t s,
                       int64_t vocab_begin = 0, int64_t vocab_rows = INT64_MAX);

// Deterministic embedding backward: tokens grouped by id on the host (TokenBuckets).
// dwte (V, C) fp32 +=, dwpe (maxT, C) fp32 += (null: none), dout (B, T, C) of type t.
void embedding_backward(DType t, float* dwte, float* dwpe, const void* dout,
                        const int32_t* unique_tokens, const int32_t* bucket_offsets,
                        const int32_t* bucket_positions, int64_t num_unique, int64_t B,
                        int64_t T, int64_t C, cudaStream_t s);

// Host side of the above: groups the positions 0..N-1 by token id (counting sort, stable).
// unique_tokens (<= N), offsets (<= N + 1), positions (N); `counts` is V ints of scratch.
// Only the token ids [first, first + V) are grouped (a vocabulary slice), as ids - first.
int64_t build_token_buckets(const int32_t* tokens, int64_t N, int64_t V, int32_t* unique_tokens,
                            int32_t* offsets, int32_t* positions, std::vector<int32_t>& counts,
                            int64_t first = 0);

void gelu_forward(DType t, void* out, const void* inp, int64_t n, cudaStream_t s);
// dinp = gelu'(inp) * dout; dinp may alias dout.
void gelu_backward(DType t, void* dinp, const void* inp, const void* dout, int64_t n,
                   cudaStream_t s);
void residual_forward(DType t, void* out, const void* a, const void* b, int64_t n,
                      cudaStream_t s);

// Column sums of x (N, OC) of type t into out (OC, fp32): out = sums, or out += sums.
// Deterministic (fixed order). scratch: bias_grad_scratch_floats(OC) floats.
void bias_grad(DType t, float* out, const void* x, int64_t N, int64_t OC, bool accumulate,
               float* scratch, cudaStream_t s);
size_t bias_grad_scratch_floats(int64_t OC);

// d (N, OC) = gelu'(pre) * d in place, and dbias (OC, fp32) = its column sums (overwritten),
// in one pass. scratch: bias_grad_scratch_floats(OC) floats.
void gelu_backward_bias(DType t, void* d, const void* pre, int64_t N, int64_t OC, float* dbias,
                        float* scratch, cudaStream_t s);

// dst[i] += src[i] (fp32).
void add_inplace(float* dst, const float* src, int64_t n, cudaStream_t s);
// Conversions between fp32 and t (plain copy when t is fp32).
void cast_from_f32(DType t, void* out, const float* in, int64_t n, cudaStream_t s);
void cast_to_f32(DType t, float* out, const void* in, int64_t n, cudaStream_t s);

// ---------------------------------------------------------------------------------------
// LayerNorm (layernorm.cu), eps 1e-5, biased variance.

// out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) fp32 saved.
void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int64_t N, int64_t C,
                       cudaStream_t s);

// dinp (N, C) = dx (accumulate = false) or dinp += dx (accumulate = true);
// dweight, dbias (C) fp32 +=; if dinp_colsum (C, fp32) is non-null it receives += the
// column sums of the final dinp (the bias gradient of the projection whose output was
// added to the residual stream). scratch: layernorm_backward_scratch_floats(N, C) floats.
void layernorm_backward(DType t, void* dinp, float* dweight, float* dbias, float* dinp_colsum,
                        const void* dout, const void* inp, const void* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate, float* scratch, cudaStream_t s);
size_t layernorm_backward_scratch_floats(int64_t N, int64_t C);

// RMSNorm (the llama family; LayerNorm's kernels without the mean and the bias):
// out (N, C) = inp / sqrt(mean(inp^2) + eps) * weight; rstd (N) fp32 saved.
void rmsnorm_forward(DType t, void* out, float* rstd, const void* inp, const void* weight,
                     int64_t N, int64_t C, float eps, cudaStream_t s);
// dinp (N, C) = dx, or += dx with accumulate (the residual stream's gradient); dweight (C)
// fp32 +=. scratch: layernorm_backward_scratch_floats(N, C) floats.
void rmsnorm_backward(DType t, void* dinp, float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int64_t N, int64_t C,
                      bool accumulate, float* scratch, cudaStream_t s);

// ---------------------------------------------------------------------------------------
// The llama family's other ops (llama_ops.cu).

// Rotary position embedding ("rotate half": pair i of a head is (x_i, x_{i + D/2})) applied
// in place to the first `heads` heads of size D of every row of qkv (N rows of row_stride
// values; the query heads, then the key heads, side by side at the row's start). Row r is
// position r % T. cos_sin: fp32 (table_rows, D/2) cosines then (table_rows, D/2) sines of
// the angles pos * inv_freq_i. inverse: rotate by minus the angle (the backward of the
// rotation, applied to the gradients of the rotated values).
void rotary_apply(DType t, void* qkv, const float* cos_sin, int64_t table_rows, int64_t N,
                  int64_t T, int64_t heads, int64_t D, int64_t row_stride, bool inverse,
                  cudaStream_t s);
// out (N, F) = silu(gate) * up with gate_up (N, 2F) = [gate | up] per row.
void swiglu_forward(DType t, void* out, const void* gate_up, int64_t N, int64_t F,
                    cudaStream_t s);
// dgate_up (N, 2F) overwritten from dh (N, F), the gradient of the SwiGLU output.
void swiglu_backward(DType t, void* dgate_up, const void* dh, const void* gate_up, int64_t N,
                     int64_t F, cudaStream_t s);
// Grouped-query attention for the kernels that take one KV head per query head: full
// (N, 3 NH D) from qkv (N, (NH + 2 KVH) D), query head h reading KV head h / (NH / KVH);
// and back for the gradients, dK and dV of each KV head summed over its group.
void gqa_expand(DType t, void* full, const void* qkv, int64_t N, int64_t NH, int64_t KVH,
                int64_t D, cudaStream_t s);
void gqa_reduce(DType t, void* dqkv, const void* dfull, int64_t N, int64_t NH, int64_t KVH,
                int64_t D, cudaStream_t s);

// ---------------------------------------------------------------------------------------
// Causal multi-head attention (attention/). qkv (B, T, 3C) with Q, K, V concatenated
// along the channels; out (B, T, C); lse (B, NH, T) fp32 log-sum-exp of the scaled scores
// in base 2 (what backward needs to rebuild the probabilities).

// The choices of train.attention / --attention: automatic (cuDNN where this build has it
// and it takes the shape, else flash), cudnn (cuDNN's fused engines, through the stateful
// CudnnAttention of cudnn_attention.h, not these functions), flash (the tensor-core
// kernels: forward with 32 query rows per warp, backward with one barrier per query tile),
// simple (CUDA cores). (Variants that lost their measurements live in the kernel workbench,
// bench/dev/attention_variants.cu.)
enum class AttentionImpl : uint8_t {
  automatic,
  cudnn,
  flash,
  simple
};
// "auto", "cudnn", "flash", "simple", ... (the names of train.attention).
const char* attention_impl_name(AttentionImpl impl);
// Whether the tensor-core flash kernels cover this case (bf16 / fp16, head size 64).
bool attention_flash_supported(DType t, int64_t head_size);
// Whether any kernel covers it (simple kernels: head sizes 16, 32, 64, 128).
bool attention_supported(DType t, int64_t head_size);

void attention_forward(DType t, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH, AttentionImpl impl, cudaStream_t s);
// dqkv (B, T, 3C) overwritten. Scratch: dq_accum fp32 (B, T, C), delta fp32 (B, NH, T).
void attention_backward(DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float* dq_accum, float* delta, AttentionImpl impl,
                        cudaStream_t s);

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy over the vocabulary (softmax_xent.cu).

// logits (N, Vp) of type t, the first V columns real. losses (N) fp32 = -log softmax[target].
// With write_grad: logits are overwritten in place by dlogits = dscale * (softmax - onehot),
// and the padded columns [V, Vp) by 0.
void softmax_xent(DType t, float* losses, void* logits, const int32_t* targets, int64_t N,
                  int64_t V, int64_t Vp, float dscale, bool write_grad, cudaStream_t s);
// The same with the vocabulary split over tp tensor ranks (logits (N, Vp) hold this rank's
// columns, the first V real, for the token ids from vocab_begin). softmax_xent_stats writes
// this rank's (max, sum of exp relative to it, target logit or 0) per row into stats
// (N x 3); the ranks' stats are then gathered into all_stats (tp x N x 3), from which
// softmax_xent_split gives every rank the same losses and, with write_grad, its columns of
// dlogits in place.
void softmax_xent_stats(DType t, float* stats, const void* logits, const int32_t* targets,
                        int64_t N, int64_t V, int64_t Vp, int64_t vocab_begin, cudaStream_t s);
void softmax_xent_split(DType t, float* losses, void* logits, const int32_t* targets,
                        const float* all_stats, int tp, int64_t N, int64_t V, int64_t Vp,
                        int64_t vocab_begin, float dscale, bool write_grad, cudaStream_t s);
// out (1 value) = mean of x (n), fixed-order sum.
void mean_reduce(float* out, const float* x, int64_t n, cudaStream_t s);
// out (V, fp32) = x (C) @ w (V, C)^T, rounded to t as the GEMM's output is.
void logits_row(DType t, float* out, const void* x, const void* w, int64_t V, int64_t C,
                cudaStream_t s);

// ---------------------------------------------------------------------------------------
// Optimizer (adamw.cu)

// Which values get weight decay, described by GPT's regular layout (flat order of
// gpt_param_infos): [embeddings: decay_embeddings] [n_layer x layer_size: decay inside
// the four ranges] [tail: no decay]. The working copy (type t) may have extra rows after
// the first `work_split` values (the padded vocabulary): value i >= work_split goes to
// i + work_shift.
struct AdamWLayout {
  int64_t n = 0;
  int64_t embeddings_end = 0;
  bool decay_embeddings = true;
  int64_t layers_begin = 0, layer_size = 0, n_layer = 0;
  int64_t decay_begin[4] = {0, 0, 0, 0}, decay_end[4] = {0, 0, 0, 0};  // within a layer
  // A decayed range after the layers (the llama family's untied LM head; empty by default).
  int64_t tail_decay_begin = 0, tail_decay_end = 0;
  int64_t work_split = 0, work_shift = 0;
  // The update covers flat indices [begin, n) (gradients and decay by flat index); master
  // weights and moments are indexed i - begin + state_offset (a ZeRO-1 shard), the working
  // copy as above (work_split = INT64_MAX: flat).
  int64_t begin = 0, state_offset = 0;
  bool vector_ok = true;  // set by adamw_update: 16-byte aligned float4 access possible
};

// AdamW in PyTorch's order over fp32 master params, grads, m, v; writes the working copy
// (type t, may be null) too. Decay follows `layout` (hp.weight_decay where it applies).
void adamw_update(DType t, float* master, void* work, const float* grads, float* m, float* v,
                  const AdamWLayout& layout, const ops::AdamWParams& hp, cudaStream_t s);

// out (1 double, device) = sum of x[i]^2, fixed order. scratch: sum_squares_scratch_doubles().
void sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t s);
size_t sum_squares_scratch_doubles();

// Number of streaming multiprocessors of the current device (cached).
int sm_count();

}  // namespace aiscale::cuda
