// The op vocabulary (ops/op.h): names, backend tables and supports() answers.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "aiscale/ops/op.h"
#include "aiscale/ops/ops.h"

namespace aiscale::ops {
namespace {

TEST(OpVocabulary, EveryOpHasOneNameThatParsesBack) {
  std::set<std::string> names;
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    const std::string name(op_name(op));
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "duplicate op name " << name;
    ASSERT_TRUE(op_by_name(name).has_value()) << name;
    EXPECT_EQ(*op_by_name(name), op);
  }
  EXPECT_FALSE(op_by_name("matmul").has_value());  // a family, not an op
}

TEST(OpVocabulary, BackendsByName) {
  for (int i = 0; i < kBackendCount; ++i) {
    const BackendId b = static_cast<BackendId>(i);
    EXPECT_EQ(backend_id_by_name(backend_name(b)), b);
    ASSERT_NE(coverage_table(b), nullptr);
  }
  EXPECT_FALSE(backend_id_by_name("metal").has_value());
  EXPECT_TRUE(backend_compiled(BackendId::reference));
  EXPECT_TRUE(backend_compiled(BackendId::cpu));
}

TEST(OpVocabulary, HostTablesHoldEveryHostOp) {
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    for (const Backend* be : {&reference_backend(), &cpu_backend()}) {
      const BackendId id = *backend_id_by_name(be->name);
      const bool implemented = !coverage(id, op).dtypes.empty();
      if (in_host_table(op)) {
        EXPECT_NE(host_entry(*be, op), nullptr) << be->name << " " << op_name(op);
        EXPECT_TRUE(implemented) << be->name << " " << op_name(op);
      } else {
        EXPECT_EQ(host_entry(*be, op), nullptr);
        EXPECT_EQ(implemented, op == Op::sum_squares || op == Op::fp8_quantize ||
                                   op == Op::fp8_scale_update) << be->name << " " << op_name(op);
      }
    }
  }
}

TEST(OpVocabulary, HostBackendsAnswerSupports) {
  const OpShape mm{.N = 7, .C = 13, .OC = 5};
  EXPECT_TRUE(supports(BackendId::cpu, Op::matmul_forward, DType::f32, mm));
  const Support bf16 = supports(BackendId::cpu, Op::matmul_forward, DType::bf16, mm);
  EXPECT_FALSE(bf16);
  EXPECT_NE(bf16.reason.find("fp32"), std::string::npos);
  EXPECT_FALSE(supports(BackendId::reference, Op::cast, DType::f32, OpShape{.n = 8}));
  EXPECT_FALSE(supports(BackendId::cpu, Op::attention_forward, DType::f32,
                        OpShape{.C = 8, .B = 1, .T = 4, .NH = 3}));
}

// The CUDA backend's answers are plain C++ (they describe the kernels), so they are
// checked in every build; whether the build has the kernels is backend_compiled.
TEST(OpVocabulary, CudaCoverageDescribesTheKernels) {
  auto cuda = [](Op op, DType t, const OpShape& s) { return cuda_supports(op, t, s); };
  const OpShape gpt2_attention{.C = 768, .B = 1, .T = 64, .NH = 12};
  EXPECT_TRUE(cuda(Op::attention_forward, DType::bf16, gpt2_attention));
  EXPECT_TRUE(cuda(Op::attention_backward, DType::f32, OpShape{.C = 64, .NH = 2}));
  const Support hs48 = cuda(Op::attention_forward, DType::bf16, OpShape{.C = 96, .NH = 2});
  EXPECT_FALSE(hs48);
  EXPECT_NE(hs48.reason.find("head size 48"), std::string::npos);
  // 16-byte packs: 8 bf16 values, 4 fp32 values.
  EXPECT_TRUE(cuda(Op::layernorm_forward, DType::f32, OpShape{.C = 12}));
  EXPECT_FALSE(cuda(Op::layernorm_forward, DType::bf16, OpShape{.C = 12}));
  EXPECT_TRUE(cuda(Op::layernorm_backward, DType::bf16, OpShape{.C = 768}));
  EXPECT_FALSE(cuda(Op::layernorm_forward, DType::f32, OpShape{.C = 4096}));
  EXPECT_FALSE(cuda(Op::gelu_forward, DType::bf16, OpShape{.n = 1001}));
  EXPECT_TRUE(cuda(Op::softmax_xent_backward, DType::bf16, OpShape{.V = 50257, .Vp = 50304}));
  EXPECT_FALSE(cuda(Op::softmax_xent_forward, DType::bf16, OpShape{.V = 50257, .Vp = 50257}));
  EXPECT_FALSE(cuda(Op::residual_backward, DType::f32, OpShape{.n = 8}));
  EXPECT_FALSE(cuda(Op::add_inplace, DType::bf16, OpShape{.n = 8}));
  EXPECT_TRUE(cuda(Op::matmul_backward, DType::f16, OpShape{.N = 3, .C = 5, .OC = 7}));
  if (!backend_compiled(BackendId::cuda)) {
    EXPECT_FALSE(supports(BackendId::cuda, Op::matmul_forward, DType::f32, OpShape{}));
  }
}

}  // namespace
}  // namespace aiscale::ops
