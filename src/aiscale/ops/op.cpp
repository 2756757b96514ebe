// The op vocabulary's names, the host backends' coverage tables and supports().
#include "aiscale/ops/op.h"

#include <array>

#include "aiscale/ops/ops.h"

// A switch over Op without a case for every op is an error in this file: adding an op
// must add its host-table entry below.
#pragma GCC diagnostic error "-Wswitch"

namespace aiscale::ops {
namespace {

constexpr std::array<std::string_view, kOpCount> kOpNames = {
    "matmul_forward",       "matmul_backward",       "embedding_forward",  "embedding_backward",
    "layernorm_forward",    "layernorm_backward",    "gelu_forward",       "gelu_backward",
    "attention_forward",    "attention_backward",    "residual_forward",   "residual_backward",
    "softmax_xent_forward", "softmax_xent_backward", "adamw_update",       "sum_squares",
    "bias_grad",            "gelu_backward_bias",    "add_inplace",        "cast",
    "mean_reduce",          "logits_row",            "rmsnorm_forward",    "rmsnorm_backward",
    "rope_forward",         "rope_backward",         "swiglu_forward",     "swiglu_backward",
    "attention_gqa_forward", "attention_gqa_backward", "fp8_quantize",      "fp8_scale_update",
};
constexpr bool all_named() {
  for (std::string_view n : kOpNames) {
    if (n.empty()) return false;
  }
  return true;
}
static_assert(all_named(), "an Op has no name: add it to kOpNames in enum order");

constexpr std::array<std::string_view, kBackendCount> kBackendNames = {"reference", "cpu",
                                                                       "cuda"};

// The entry names the ops::Backend field (fp32 only).
#define AISCALE_HOST_ROW(op) {Op::op, kF32, "Backend::" #op}
#define AISCALE_HOST_ABSENT(op, why) {Op::op, kNoDTypes, why}

// Both host backends: the fast cpu backend covers exactly what the reference covers (it
// is checked against it op by op). Give cpu a table of its own the day they differ.
constexpr OpCoverage kHostCoverage[] = {
    AISCALE_HOST_ROW(matmul_forward),
    AISCALE_HOST_ROW(matmul_backward),
    AISCALE_HOST_ROW(embedding_forward),
    AISCALE_HOST_ROW(embedding_backward),
    AISCALE_HOST_ROW(layernorm_forward),
    AISCALE_HOST_ROW(layernorm_backward),
    AISCALE_HOST_ROW(gelu_forward),
    AISCALE_HOST_ROW(gelu_backward),
    AISCALE_HOST_ROW(attention_forward),
    AISCALE_HOST_ROW(attention_backward),
    AISCALE_HOST_ROW(residual_forward),
    AISCALE_HOST_ROW(residual_backward),
    AISCALE_HOST_ROW(softmax_xent_forward),
    AISCALE_HOST_ROW(softmax_xent_backward),
    AISCALE_HOST_ROW(adamw_update),
    {Op::sum_squares, kF32, "ops::sum_squares (shared by both host backends)"},
    AISCALE_HOST_ABSENT(bias_grad, "part of matmul_backward (dbias)"),
    AISCALE_HOST_ABSENT(gelu_backward_bias, "gelu_backward, then matmul_backward's dbias"),
    AISCALE_HOST_ABSENT(add_inplace, "the host ops accumulate where ops.h says so"),
    AISCALE_HOST_ABSENT(cast, "the host backends compute in fp32 only"),
    AISCALE_HOST_ABSENT(mean_reduce, "the CPU model averages the losses itself"),
    AISCALE_HOST_ABSENT(logits_row, "matmul_forward over one row"),
    AISCALE_HOST_ROW(rmsnorm_forward),
    AISCALE_HOST_ROW(rmsnorm_backward),
    AISCALE_HOST_ROW(rope_forward),
    AISCALE_HOST_ROW(rope_backward),
    AISCALE_HOST_ROW(swiglu_forward),
    AISCALE_HOST_ROW(swiglu_backward),
    AISCALE_HOST_ROW(attention_gqa_forward),
    AISCALE_HOST_ROW(attention_gqa_backward),
    {Op::fp8_quantize, kF32, "ops::fp8_quantize (ops/fp8.h, shared by both host backends)"},
    {Op::fp8_scale_update, kF32, "ops::fp8_scale_update (ops/fp8.h, shared by both host backends)"},
};
static_assert(covers_every_op_in_order(kHostCoverage, int(std::size(kHostCoverage))),
              "host coverage: one row per Op, in enum order");


#undef AISCALE_HOST_ROW
#undef AISCALE_HOST_ABSENT

// Shape limits that hold for the host backends' ops (beyond sizes being positive).
Support host_shape_support(Op op, const OpShape& s) {
  if ((op == Op::attention_forward || op == Op::attention_backward) &&
      (s.NH <= 0 || s.C % s.NH != 0)) {
    return Support::no("attention needs C a multiple of NH");
  }
  if ((op == Op::attention_gqa_forward || op == Op::attention_gqa_backward) &&
      (s.NH <= 0 || s.C % s.NH != 0 || s.NKV <= 0 || s.NH % s.NKV != 0)) {
    return Support::no("grouped-query attention needs C a multiple of NH and NH of NKV");
  }
  return Support::yes();
}

}  // namespace

namespace {
// The name of enumerator e in a table of names in enum order, or "?".
template <typename E, size_t N>
std::string_view name_of(const std::array<std::string_view, N>& names, E e) {
  const auto i = static_cast<size_t>(e);
  return i < N ? names[i] : std::string_view("?");
}
// The enumerator named `name` in such a table.
template <typename E, size_t N>
std::optional<E> by_name(const std::array<std::string_view, N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}
}  // namespace

std::string_view op_name(Op op) { return name_of(kOpNames, op); }
std::optional<Op> op_by_name(std::string_view name) { return by_name<Op>(kOpNames, name); }
std::string_view backend_name(BackendId b) { return name_of(kBackendNames, b); }
std::optional<BackendId> backend_id_by_name(std::string_view name) {
  return by_name<BackendId>(kBackendNames, name);
}

bool backend_compiled(BackendId b) {
#if AISCALE_HAVE_CUDA
  constexpr bool cuda = true;
#else
  constexpr bool cuda = false;
#endif
  return b == BackendId::cuda ? cuda : b != BackendId::count;
}

const OpCoverage* coverage_table(BackendId b) {
  switch (b) {
    case BackendId::reference:
    case BackendId::cpu: return kHostCoverage;
    case BackendId::cuda: return cuda_coverage_table();
    case BackendId::count: break;
  }
  return nullptr;
}

const OpCoverage& coverage(BackendId b, Op op) {
  return coverage_table(b)[static_cast<int>(op)];
}

Support supports(BackendId b, Op op, DType t, const OpShape& shape) {
  if (b == BackendId::count || op == Op::count) return Support::no("not a backend or op");
  if (!backend_compiled(b)) {
    return Support::no(std::string(backend_name(b)) + " is not in this build");
  }
  if (b == BackendId::cuda) return cuda_supports(op, t, shape);
  const OpCoverage& row = coverage(b, op);
  if (row.dtypes.empty()) return Support::no(row.entry);
  if (!row.dtypes.has(t)) return Support::no("the host backends compute in fp32 only");
  return host_shape_support(op, shape);
}

const void* host_entry(const Backend& be, Op op) {
  switch (op) {
    case Op::matmul_forward: return reinterpret_cast<const void*>(be.matmul_forward);
    case Op::matmul_backward: return reinterpret_cast<const void*>(be.matmul_backward);
    case Op::embedding_forward: return reinterpret_cast<const void*>(be.embedding_forward);
    case Op::embedding_backward: return reinterpret_cast<const void*>(be.embedding_backward);
    case Op::layernorm_forward: return reinterpret_cast<const void*>(be.layernorm_forward);
    case Op::layernorm_backward: return reinterpret_cast<const void*>(be.layernorm_backward);
    case Op::gelu_forward: return reinterpret_cast<const void*>(be.gelu_forward);
    case Op::gelu_backward: return reinterpret_cast<const void*>(be.gelu_backward);
    case Op::attention_forward: return reinterpret_cast<const void*>(be.attention_forward);
    case Op::attention_backward: return reinterpret_cast<const void*>(be.attention_backward);
    case Op::residual_forward: return reinterpret_cast<const void*>(be.residual_forward);
    case Op::residual_backward: return reinterpret_cast<const void*>(be.residual_backward);
    case Op::softmax_xent_forward: return reinterpret_cast<const void*>(be.softmax_xent_forward);
    case Op::softmax_xent_backward:
      return reinterpret_cast<const void*>(be.softmax_xent_backward);
    case Op::adamw_update: return reinterpret_cast<const void*>(be.adamw_update);
    case Op::rmsnorm_forward: return reinterpret_cast<const void*>(be.rmsnorm_forward);
    case Op::rmsnorm_backward: return reinterpret_cast<const void*>(be.rmsnorm_backward);
    case Op::rope_forward: return reinterpret_cast<const void*>(be.rope_forward);
    case Op::rope_backward: return reinterpret_cast<const void*>(be.rope_backward);
    case Op::swiglu_forward: return reinterpret_cast<const void*>(be.swiglu_forward);
    case Op::swiglu_backward: return reinterpret_cast<const void*>(be.swiglu_backward);
    case Op::attention_gqa_forward:
      return reinterpret_cast<const void*>(be.attention_gqa_forward);
    case Op::attention_gqa_backward:
      return reinterpret_cast<const void*>(be.attention_gqa_backward);
    case Op::sum_squares:
    case Op::fp8_quantize:
    case Op::fp8_scale_update:
    case Op::bias_grad:
    case Op::gelu_backward_bias:
    case Op::add_inplace:
    case Op::cast:
    case Op::mean_reduce:
    case Op::logits_row:
    case Op::count: return nullptr;
  }
  return nullptr;
}

}  // namespace aiscale::ops
