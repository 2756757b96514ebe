// The CUDA backend's coverage table and supports() answer. Plain C++ (no CUDA header),
// compiled in every build: it describes the kernels of this folder, and
// ops::backend_compiled(BackendId::cuda) says whether this build has them.
#include <iterator>
#include <string>

#include "aiscale/ops/cuda/coverage.h"
#include "aiscale/ops/op.h"

namespace aiscale::ops {
namespace {

constexpr DTypeSet kAll = kAllDTypes;

// Entry points in ops/cuda/cuda_ops.cuh (cudnn attention: cudnn_attention.h).
constexpr OpCoverage kCudaCoverage[] = {
    {Op::matmul_forward, kAll,
     "cuda::linear_forward (cuBLASLt; epilogues bias, bias+residual, bias+GELU with aux)"},
    {Op::matmul_backward, kAll,
     "cuda::linear_backward_input (+dGELU, +its bias gradient) and "
     "cuda::linear_backward_weight (+= dweight, dbias)"},
    {Op::embedding_forward, kAll, "cuda::embedding_forward"},
    {Op::embedding_backward, kAll,
     "cuda::embedding_backward over cuda::build_token_buckets (deterministic, no atomics)"},
    {Op::layernorm_forward, kAll, "cuda::layernorm_forward"},
    {Op::layernorm_backward, kAll,
     "cuda::layernorm_backward (dinp = or +=, optional column sums of dinp)"},
    {Op::gelu_forward, kAll, "cuda::gelu_forward"},
    {Op::gelu_backward, kAll, "cuda::gelu_backward"},
    {Op::attention_forward, kAll,
     "cuda::attention_forward (flash, simple) and cuda::CudnnAttention::forward (cudnn)"},
    {Op::attention_backward, kAll,
     "cuda::attention_backward (flash, simple) and cuda::CudnnAttention::backward (cudnn)"},
    {Op::residual_forward, kAll, "cuda::residual_forward"},
    {Op::residual_backward, kNoDTypes,
     "the CUDA model folds it into layernorm_backward's accumulate and add_inplace"},
    {Op::softmax_xent_forward, kAll, "cuda::softmax_xent (write_grad = false)"},
    {Op::softmax_xent_backward, kAll,
     "cuda::softmax_xent (write_grad = true: forward and dlogits in place, one scale)"},
    {Op::adamw_update, kAll, "cuda::adamw_update (fp32 master, working copy of the dtype)"},
    {Op::sum_squares, kF32, "cuda::sum_squares"},
    {Op::bias_grad, kAll, "cuda::bias_grad"},
    {Op::gelu_backward_bias, kAll, "cuda::gelu_backward_bias"},
    {Op::add_inplace, kF32, "cuda::add_inplace"},
    {Op::cast, kAll, "cuda::cast_from_f32, cuda::cast_to_f32"},
    {Op::mean_reduce, kF32, "cuda::mean_reduce"},
    {Op::logits_row, kAll, "cuda::logits_row"},
    {Op::rmsnorm_forward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::rmsnorm_backward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::rope_forward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::rope_backward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::swiglu_forward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::swiglu_backward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::attention_gqa_forward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::attention_gqa_backward, kNoDTypes, "no CUDA kernel in this backend"},
    {Op::fp8_quantize, kAll, "cuda::fp8_quantize (ops/cuda/fp8.cuh; both layouts, amax)"},
    {Op::fp8_scale_update, kF32, "cuda::fp8_scale_update (ops/cuda/fp8.cuh)"},
};
static_assert(covers_every_op_in_order(kCudaCoverage, int(std::size(kCudaCoverage))),
              "cuda coverage: one row per Op, in enum order");

std::string n_packs(const char* what, DType t) {
  return std::string(what) + " must be a positive multiple of " +
         std::to_string(cuda::coverage::pack(t)) + " (16-byte packs of " +
         std::string(t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "fp16") + ")";
}

}  // namespace

const OpCoverage* cuda_coverage_table() { return kCudaCoverage; }

Support cuda_supports(Op op, DType t, const OpShape& s) {
  namespace cov = cuda::coverage;
  const OpCoverage& row = kCudaCoverage[static_cast<int>(op)];
  if (row.dtypes.empty()) return Support::no(row.entry);
  if (!row.dtypes.has(t)) return Support::no(std::string(op_name(op)) + " takes fp32 only");
  switch (op) {
    case Op::embedding_forward:
    case Op::embedding_backward:
    case Op::logits_row:
      return cov::packed(t, s.C) ? Support::yes() : Support::no(n_packs("C", t));
    case Op::layernorm_forward:
      return cov::layernorm_forward_ok(t, s.C)
                 ? Support::yes()
                 : Support::no(n_packs("C", t) + ", at most " +
                               std::to_string(512 * cov::pack(t)));
    case Op::layernorm_backward:
      return cov::layernorm_backward_ok(t, s.C)
                 ? Support::yes()
                 : Support::no(n_packs("C", t) + ", at most " +
                               std::to_string(1024 * cov::pack(t)));
    case Op::fp8_quantize:
      return cov::fp8_shape_ok(s.N, s.C) ? Support::yes()
                                          : Support::no("rows N and columns C must be positive "
                                                        "multiples of 16");
    case Op::gelu_forward:
    case Op::gelu_backward:
    case Op::residual_forward:
      return cov::packed(t, s.n) ? Support::yes() : Support::no(n_packs("n", t));
    case Op::bias_grad:
    case Op::gelu_backward_bias:
      return cov::packed(t, s.OC) ? Support::yes() : Support::no(n_packs("OC", t));
    case Op::softmax_xent_forward:
    case Op::softmax_xent_backward:
      return cov::packed(t, s.Vp) && s.Vp >= s.V
                 ? Support::yes()
                 : Support::no(n_packs("the padded vocabulary Vp", t) + " and >= V");
    case Op::attention_forward:
    case Op::attention_backward: {
      if (s.NH <= 0 || s.C % s.NH != 0) return Support::no("C must be a multiple of NH");
      const int64_t hs = s.C / s.NH;
      return cov::attention_head_size_ok(hs)
                 ? Support::yes()
                 : Support::no("head size " + std::to_string(hs) +
                               ": the CUDA attention kernels take 16, 32, 64 or 128");
    }
    case Op::matmul_forward:
    case Op::matmul_backward:
    case Op::residual_backward:
    case Op::adamw_update:
    case Op::sum_squares:
    case Op::add_inplace:
    case Op::cast:
    case Op::mean_reduce:
    case Op::rmsnorm_forward:
    case Op::rmsnorm_backward:
    case Op::rope_forward:
    case Op::rope_backward:
    case Op::swiglu_forward:
    case Op::swiglu_backward:
    case Op::attention_gqa_forward:
    case Op::attention_gqa_backward:
    case Op::fp8_scale_update:
    case Op::count:
      break;
  }
  return Support::yes();
}

}  // namespace aiscale::ops
