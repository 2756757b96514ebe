// The op vocabulary: every op of aiscale, named once, and what each backend implements.
//
// An op is one numerical operation with one definition (the host reference where it has
// one; see ops.h for the layouts and the accumulate / overwrite conventions). A backend
// implements an op in its own calling convention: the host backends (`reference`, `cpu`)
// through the function table ops::Backend (ops.h), the CUDA backend through the launchers
// of ops/cuda/cuda_ops.cuh (device pointers, an element type, a stream, fused epilogues).
// What stays the same across backends is the op's name, its meaning and its checks:
// tests/ops (the test_ops program) runs every op on every backend against the reference.
//
// Adding an op: a new enumerator below, its name in op.cpp, a row in every backend's
// coverage table (the host backends share one in op.cpp; cuda: ops/cuda/coverage.cpp)
// and a harness case in tests/ops. The first three are compile-time checks (static_assert on
// the count and order of each table); the last is `test_ops coverage` (ctest ops.coverage).
//
// Host-only header without fmt, so that .cu files may include it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "aiscale/core/dtype.h"

namespace aiscale::ops {

enum class Op : uint8_t {
  matmul_forward,         // out = inp @ weight^T + bias (CUDA: fused epilogues, below)
  matmul_backward,        // dinp, dweight (+=), dbias (+=)
  embedding_forward,      // out = wte[tokens] + wpe[t]
  embedding_backward,     // dwte (+=), dwpe (+=)
  layernorm_forward,      // out, mean, rstd
  layernorm_backward,     // dinp (+=), dweight (+=), dbias (+=)
  gelu_forward,           // tanh approximation
  gelu_backward,          // dinp = gelu'(inp) * dout
  attention_forward,      // causal multi-head attention
  attention_backward,     // dqkv
  residual_forward,       // out = a + b
  residual_backward,      // da += dout, db += dout
  softmax_xent_forward,   // losses = -log softmax(logits)[target]
  softmax_xent_backward,  // dlogits (in place allowed)
  adamw_update,           // one AdamW step
  sum_squares,            // sum of x^2 in double (global-norm clipping)
  bias_grad,              // column sums of (N, OC): a bias gradient on its own
  gelu_backward_bias,     // dGELU in place and the column sums of the result, one pass
  add_inplace,            // dst += src (fp32 gradients)
  cast,                   // fp32 <-> the activations' element type
  mean_reduce,            // mean of n values (the loss)
  logits_row,             // one row of logits: x (C) @ w (V, C)^T
  // The llama family's ops (host table entries after adamw_update's, see ops.h):
  rmsnorm_forward,        // out = inp * rstd * weight, rstd saved
  rmsnorm_backward,       // dinp (+=), dweight (+=)
  rope_forward,           // rotary positions on the Q and K heads of fused QKV activations
  rope_backward,          // the inverse rotation of their gradient
  swiglu_forward,         // out = silu(gate) * up over fused gate/up activations
  swiglu_backward,        // dgate_up
  attention_gqa_forward,  // causal attention, query heads sharing key/value heads
  attention_gqa_backward, // dqkv
  // FP8 training (ops/fp8.h: free functions on the host, like sum_squares):
  fp8_quantize,           // x * scale to e4m3 / e5m2, row-major and / or transposed, amax
  fp8_scale_update,       // delayed scaling: amax history, next scales
  count
};
inline constexpr int kOpCount = static_cast<int>(Op::count);

std::string_view op_name(Op op);
std::optional<Op> op_by_name(std::string_view name);

// The backends, in the order of their coverage tables.
enum class BackendId : uint8_t { reference, cpu, cuda, count };
inline constexpr int kBackendCount = static_cast<int>(BackendId::count);

std::string_view backend_name(BackendId b);
std::optional<BackendId> backend_id_by_name(std::string_view name);
// Whether this build has the backend (cuda: built with the CUDA toolkit). Whether a GPU
// is present at run time is a separate question, answered where a GPU is opened.
bool backend_compiled(BackendId b);

// Element types as a set.
struct DTypeSet {
  uint8_t bits = 0;
  constexpr bool has(DType t) const { return (bits >> static_cast<int>(t)) & 1u; }
  constexpr bool empty() const { return bits == 0; }
};
inline constexpr DTypeSet kNoDTypes{0};
inline constexpr DTypeSet kF32{1u << static_cast<int>(DType::f32)};
inline constexpr DTypeSet kAllDTypes{
    (1u << static_cast<int>(DType::f32)) | (1u << static_cast<int>(DType::bf16)) |
    (1u << static_cast<int>(DType::f16))};

// One row of a backend's coverage table: the op, the element types it implements the op
// for (empty: not implemented), and the entry point or, when not implemented, why.
struct OpCoverage {
  Op op;
  DTypeSet dtypes;
  const char* entry;  // e.g. "cuda::linear_forward", or the reason it is absent
};

// A backend's table: kOpCount rows, row i for Op i.
const OpCoverage* coverage_table(BackendId b);
const OpCoverage& coverage(BackendId b, Op op);

// True when `table` (n rows) has one row per op, in enum order. Every backend's table is
// checked with it in a static_assert.
constexpr bool covers_every_op_in_order(const OpCoverage* table, int n) {
  if (n != kOpCount) return false;
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(table[i].op) != i || table[i].entry == nullptr) return false;
  }
  return true;
}

// The sizes an op is asked about. Each op reads the fields of its own signature (ops.h):
// N rows, C channels, OC output channels, B batch, T sequence, NH heads, V vocabulary
// (Vp padded), n elements. Unused fields stay 0.
struct OpShape {
  int64_t N = 0, C = 0, OC = 0;
  int64_t B = 0, T = 0, NH = 0;
  int64_t V = 0, Vp = 0;
  int64_t n = 0;
  int64_t NKV = 0;  // key/value heads (grouped-query attention)
};

// The answer to "can backend b run op on dtype t at this shape?", with the reason when not.
struct Support {
  bool ok = false;
  std::string reason;
  explicit operator bool() const { return ok; }
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// ggml's supports_op: asks the backend instead of letting a kernel fail. The shape
// constraints of the CUDA kernels (packs of 16 bytes, head sizes) come from
// ops/cuda/coverage.h, the same functions the kernels' launchers use.
Support supports(BackendId b, Op op, DType t, const OpShape& shape);

// The CUDA backend's answer (ops/cuda/coverage.cpp; compiled in every build, since it
// describes the kernels and needs no CUDA header).
Support cuda_supports(Op op, DType t, const OpShape& shape);
const OpCoverage* cuda_coverage_table();

}  // namespace aiscale::ops
