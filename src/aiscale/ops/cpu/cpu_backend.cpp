// The fast CPU backend's table. Kernels live one family per file in this folder.
#include "aiscale/ops/cpu/kernels.h"

namespace aiscale::ops {

const Backend& cpu_backend() {
  static const Backend backend{
      "cpu",
      cpu::matmul_forward,
      cpu::matmul_backward,
      cpu::embedding_forward,
      cpu::embedding_backward,
      cpu::layernorm_forward,
      cpu::layernorm_backward,
      cpu::gelu_forward,
      cpu::gelu_backward,
      mha_forward<cpu::attention_gqa_forward>,
      mha_backward<cpu::attention_gqa_backward>,
      cpu::residual_forward,
      cpu::residual_backward,
      cpu::softmax_xent_forward,
      cpu::softmax_xent_backward,
      cpu::adamw_update,
      cpu::rmsnorm_forward,
      cpu::rmsnorm_backward,
      cpu::rope_forward,
      cpu::rope_backward,
      cpu::swiglu_forward,
      cpu::swiglu_backward,
      cpu::attention_gqa_forward,
      cpu::attention_gqa_backward,
  };
  return backend;
}

}  // namespace aiscale::ops
