// GEMMs through cuBLASLt: bf16/fp16 inputs with fp32 accumulation (fp32 inputs: plain
// fp32, no TF32), fused bias / GELU / bias-gradient epilogues, and a plan cache so that a
// step pays for heuristics only on its first call of each shape.
#include <cublasLt.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/coverage.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/cuda/fp8.cuh"

namespace aiscale::cuda {
namespace {

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLASLt error ") + std::to_string(static_cast<int>(st)) + " in " +
                what);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

cudaDataType_t fp8_type(ops::Fp8Format f) {
  return f == ops::Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::dgelu_bgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::bgradb: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_bias(Epilogue e) {
  return e == Epilogue::bias || e == Epilogue::gelu_aux_bias || e == Epilogue::dgelu_bgrad ||
         e == Epilogue::bgradb;
}
bool bias_is_gradient(Epilogue e) { return e == Epilogue::dgelu_bgrad || e == Epilogue::bgradb; }
bool uses_aux(Epilogue e) {
  return e == Epilogue::gelu_aux_bias || e == Epilogue::dgelu || e == Epilogue::dgelu_bgrad;
}

// Largest power of two (<= 256) that divides the address: cuBLASLt picks kernels by it.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

struct PlanKey {
  bool ta, tb, beta_nonzero, fp8, fast_accum;
  ops::Fp8Format fa, fb;
  int64_t m, n, k, lda, ldb, ldc, ldd, ld_aux;
  DType ab, cd;
  Epilogue epi;
  uint32_t align_a, align_b, align_c, align_d;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(PlanKey)) == 0; }
};

PlanKey make_key(const GemmCall& c) {
  PlanKey k;
  std::memset(&k, 0, sizeof(k));  // padding bytes take part in the comparison
  k.ta = c.trans_a;
  k.tb = c.trans_b;
  k.beta_nonzero = c.beta != 0.0f;
  k.fp8 = c.fp8;
  k.fast_accum = c.fp8 && c.fast_accum;
  k.fa = c.fp8 ? c.a_format : ops::Fp8Format::e4m3;
  k.fb = c.fp8 ? c.b_format : ops::Fp8Format::e4m3;
  k.m = c.m;
  k.n = c.n;
  k.k = c.k;
  k.lda = c.lda;
  k.ldb = c.ldb;
  k.ldc = c.ldc;
  k.ldd = c.ldd;
  k.ld_aux = uses_aux(c.epilogue) ? c.ld_aux : 0;
  k.ab = c.ab_type;
  k.cd = c.cd_type;
  k.epi = c.epilogue;
  k.align_a = alignment_of(c.a);
  k.align_b = alignment_of(c.b);
  k.align_c = alignment_of(c.beta != 0.0f ? c.c : c.d);
  k.align_d = alignment_of(c.d);
  return k;
}

constexpr int kCandidates = 8;  // heuristic results kept for autotuning

struct Plan {
  PlanKey key;
  bool ok = false;
  bool tuned = false;
  int chosen = 0;           // index into candidates after tuning
  float tuned_ms[kCandidates] = {};
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t candidates[kCandidates] = {};  // a plain array: a std::vector here
  int n_candidates = 0;                               // crashed nvcc 13 in C++20 mode
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<Plan> plans;
  bool autotune = false;
  cudaEvent_t start = nullptr, stop = nullptr;

  Plan& plan_for(const GemmCall& c) {
    const PlanKey key = make_key(c);
    for (Plan& p : plans)
      if (p.key == key) return p;
    plans.emplace_back();
    Plan& p = plans.back();
    p.key = key;
    build(p, c);
    return p;
  }

  void build(Plan& p, const GemmCall& c) {
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // fp32 inputs: true fp32
    check_lt(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t opa = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
             "set TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
             "set TRANSB");
    const cublasLtEpilogue_t epi = lt_epilogue(c.epilogue);
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
             "set EPILOGUE");
    if (uses_bias(c.epilogue)) {
      // Bias gradients are fp32 (they feed fp32 parameter gradients); a bias read in the
      // forward pass has the activation type.
      const cudaDataType_t bt = bias_is_gradient(c.epilogue) ? CUDA_R_32F : cuda_type(c.cd_type);
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                              sizeof(bt)),
               "set BIAS_DATA_TYPE");
    }
    if (uses_aux(c.epilogue)) {
      const int64_t ld_aux = c.ld_aux;
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux,
                                              sizeof(ld_aux)),
               "set AUX_LD");
    }
    if (c.fp8) {
      const int8_t fast = c.fast_accum ? 1 : 0;
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                              sizeof(fast)),
               "set FAST_ACCUM");
    }
    const cudaDataType_t ta = c.fp8 ? fp8_type(c.a_format) : cuda_type(c.ab_type);
    const cudaDataType_t tb = c.fp8 ? fp8_type(c.b_format) : cuda_type(c.ab_type);
    const cudaDataType_t tcd = cuda_type(c.cd_type);
    check_lt(cublasLtMatrixLayoutCreate(&p.la, ta, c.trans_a ? c.k : c.m, c.trans_a ? c.m : c.k,
                                        c.lda),
             "layout A");
    check_lt(cublasLtMatrixLayoutCreate(&p.lb, tb, c.trans_b ? c.n : c.k, c.trans_b ? c.k : c.n,
                                        c.ldb),
             "layout B");
    check_lt(cublasLtMatrixLayoutCreate(&p.lc, tcd, c.m, c.n, c.beta != 0.0f ? c.ldc : c.ldd),
             "layout C");
    check_lt(cublasLtMatrixLayoutCreate(&p.ld, tcd, c.m, c.n, c.ldd), "layout D");

    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    const uint64_t ws = workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    const uint32_t al[4] = {p.key.align_a, p.key.align_b, p.key.align_c, p.key.align_d};
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0],
                                         sizeof(uint32_t));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1],
                                         sizeof(uint32_t));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2],
                                         sizeof(uint32_t));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3],
                                         sizeof(uint32_t));
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.la, p.lb, p.lc, p.ld,
                                                             pref, kCandidates, results, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < count; ++i)
        if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates[p.n_candidates++] = results[i].algo;
    p.ok = p.n_candidates > 0;
    if (p.ok) p.algo = p.candidates[0];
  }

  cublasStatus_t launch(Plan& p, const cublasLtMatmulAlgo_t& algo, const GemmCall& c,
                        cudaStream_t stream) {
    const void* cptr = c.beta != 0.0f ? c.c : c.d;
    return cublasLtMatmul(handle, p.desc, &c.alpha, c.a, p.la, c.b, p.lb, &c.beta, cptr, p.lc, c.d,
                          p.ld, &algo, workspace, workspace_bytes, stream);
  }

  // Times every candidate on this call's buffers (it runs the call several times: only
  // for calls that may repeat, e.g. a warm-up step) and keeps the fastest.
  void tune(Plan& p, const GemmCall& c, cudaStream_t stream) {
    p.tuned = true;
    if (p.n_candidates < 2) return;
    if (!start) {
      AISCALE_CUDA_CHECK(cudaEventCreate(&start));
      AISCALE_CUDA_CHECK(cudaEventCreate(&stop));
    }
    float best = INFINITY;
    for (int i = 0; i < p.n_candidates; ++i) {
      p.tuned_ms[i] = INFINITY;
      if (launch(p, p.candidates[i], c, stream) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
      AISCALE_CUDA_CHECK(cudaEventRecord(start, stream));
      bool ok = true;
      for (int r = 0; r < 3 && ok; ++r) ok = launch(p, p.candidates[i], c, stream) == CUBLAS_STATUS_SUCCESS;
      AISCALE_CUDA_CHECK(cudaEventRecord(stop, stream));
      AISCALE_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (!ok) continue;
      p.tuned_ms[i] = ms / 3.0f;
      if (p.tuned_ms[i] < best) {
        best = p.tuned_ms[i];
        p.chosen = i;
      }
    }
    p.algo = p.candidates[p.chosen];
  }

  static void destroy(Plan& p) {
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.la) cublasLtMatrixLayoutDestroy(p.la);
    if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
    if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
    if (p.ld) cublasLtMatrixLayoutDestroy(p.ld);
  }
};

Gemm::Gemm(void* workspace, size_t workspace_bytes) : impl_(new Impl) {
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace_bytes;
  impl_->plans.reserve(64);
  check_lt(cublasLtCreate(&impl_->handle), "cublasLtCreate");
}

Gemm::~Gemm() {
  for (Plan& p : impl_->plans) Impl::destroy(p);
  if (impl_->start) cudaEventDestroy(impl_->start);
  if (impl_->stop) cudaEventDestroy(impl_->stop);
  if (impl_->handle) cublasLtDestroy(impl_->handle);
  delete impl_;
}

bool Gemm::supported(const GemmCall& call) { return impl_->plan_for(call).ok; }

void Gemm::set_autotune(bool on) { impl_->autotune = on; }

std::string Gemm::summary() const {
  static const char* epi_names[] = {"none", "bias", "gelu_aux_bias", "dgelu", "dgelu_bgrad",
                                    "bgradb"};
  std::string out;
  for (const Plan& p : impl_->plans) {
    const PlanKey& k = p.key;
    out += "  m=" + std::to_string(k.m) + " n=" + std::to_string(k.n) + " k=" + std::to_string(k.k) +
           (k.ta ? " A^T" : " A") + (k.tb ? " B^T" : " B") + " ab=" + dtype_str(k.ab) +
           " cd=" + dtype_str(k.cd) +
           (k.fp8 ? std::string(" fp8 ") + ops::fp8_format_name(k.fa) + "x" +
                        ops::fp8_format_name(k.fb) + (k.fast_accum ? " fast-accum" : "")
                  : std::string()) +
           " beta=" + (k.beta_nonzero ? "1" : "0") +
           " epilogue=" + epi_names[static_cast<int>(k.epi)] + (p.ok ? " ok" : " UNSUPPORTED");
    if (p.tuned && p.n_candidates > 1) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " tuned: %d candidates, chose #%d %.3f ms (#0 %.3f ms)",
                    p.n_candidates, p.chosen, double(p.tuned_ms[p.chosen]),
                    double(p.tuned_ms[0]));
      out += buf;
    }
    out += "\n";
  }
  return out;
}

bool Gemm::run(const GemmCall& c, cudaStream_t stream) {
  Plan& p = impl_->plan_for(c);
  if (!p.ok) return false;
  if (uses_bias(c.epilogue)) {
    const void* bias = c.bias;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof(bias)),
             "set BIAS_POINTER");
  }
  if (uses_aux(c.epilogue)) {
    const void* aux = c.aux;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                            sizeof(aux)),
             "set AUX_POINTER");
  }
  if (c.fp8) {
    const float* sa = c.a_scale;
    const float* sb = c.b_scale;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
                                            sizeof(sa)),
             "set A_SCALE_POINTER");
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
                                            sizeof(sb)),
             "set B_SCALE_POINTER");
  }
  if (impl_->autotune && !p.tuned) impl_->tune(p, c, stream);
  const cublasStatus_t st = impl_->launch(p, p.algo, c, stream);
  // The heuristics may offer an algorithm that the launch then refuses (e.g. an FP8 scale
  // pointer without 16-byte alignment): nothing ran; the plan is marked unsupported, as if
  // no algorithm had been found.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    p.ok = false;
    return false;
  }
  check_lt(st, "cublasLtMatmul");
  return true;
}

// ---------------------------------------------------------------------------------------
// Row-major linear layers

namespace {
[[noreturn]] void no_algorithm(const char* what, int64_t m, int64_t n, int64_t k) {
  throw Error(std::string("cuBLASLt has no algorithm for ") + what + " (m=" + std::to_string(m) +
              ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ")");
}

// The column-major product d (m x n) = op(a) op(b) over k, a and b of type ab, d of cd.
GemmCall product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
                 int64_t lda, const void* b, int64_t ldb, void* d, int64_t ldd, DType ab,
                 DType cd) {
  GemmCall c;
  c.trans_a = trans_a;
  c.trans_b = trans_b;
  c.m = m;
  c.n = n;
  c.k = k;
  c.a = a;
  c.lda = lda;
  c.b = b;
  c.ldb = ldb;
  c.d = d;
  c.ldd = ldd;
  c.ab_type = ab;
  c.cd_type = cd;
  return c;
}

// c with epilogue e and its bias (or bias-gradient) vector; false where cuBLASLt has no
// algorithm for that epilogue.
bool run_with(Gemm& g, GemmCall c, Epilogue e, const void* bias, cudaStream_t s) {
  c.epilogue = e;
  c.bias = const_cast<void*>(bias);
  return g.run(c, s);
}
}  // namespace

namespace {
// A linear layer's forward product `c` (out^T = W x^T, D = out) with the forward's epilogues:
// + residual (as C), + bias, or GELU into pre_gelu and out (fused in the epilogue where
// cuBLASLt takes it, else a kernel after). False: no algorithm, nothing run.
bool forward_with_epilogues(Gemm& g, DType t, GemmCall c, void* out, void* pre_gelu,
                            const void* bias, const void* residual, int64_t N, int64_t OC,
                            const LinearOptions& o, cudaStream_t s) {
  if (residual) {
    c.c = residual;
    c.ldc = OC;
    c.beta = 1.0f;
  }
  if (pre_gelu) {
    AISCALE_CUDA_REQUIRE(residual == nullptr, "linear_forward: GELU with a residual is not supported");
    if (o.fused_gelu && bias) {
      GemmCall fused = c;
      fused.aux = pre_gelu;
      fused.ld_aux = OC;
      if (run_with(g, fused, Epilogue::gelu_aux_bias, bias, s)) return true;
    }
    c.d = pre_gelu;
  }
  if (!run_with(g, c, bias ? Epilogue::bias : Epilogue::none, bias, s)) return false;
  if (pre_gelu) gelu_forward(t, out, pre_gelu, N * OC, s);
  return true;
}
}  // namespace

void linear_forward(Gemm& g, DType t, void* out, void* pre_gelu, const void* inp,
                    const void* weight, const void* bias, const void* residual, int64_t N,
                    int64_t C, int64_t OC, const LinearOptions& o, cudaStream_t s) {
  // Column-major view: out^T (OC x N) = weight^T... i.e. op(A) = W (OC x C) from its
  // row-major storage (C x OC column-major, transposed), B = inp^T (C x N).
  const GemmCall c = product(true, false, OC, N, C, weight, C, inp, C, out, OC, t, t);
  if (!forward_with_epilogues(g, t, c, out, pre_gelu, bias, residual, N, OC, o, s))
    no_algorithm("linear forward", c.m, c.n, c.k);
}

namespace {
// With gelu_pre: dinp (N, C) times gelu'(gelu_pre) in place, and with dbias_gelu its column
// sums (overwritten): a linear layer's input gradient through the GELU before it, unfused.
void dgelu_after(DType t, void* dinp, const void* gelu_pre, float* dbias_gelu, float* scratch,
                 int64_t N, int64_t C, cudaStream_t s) {
  if (!gelu_pre) return;
  if (dbias_gelu) gelu_backward_bias(t, dinp, gelu_pre, N, C, dbias_gelu, scratch, s);
  else gelu_backward(t, dinp, gelu_pre, dinp, N * C, s);
}
}  // namespace

void linear_backward_input(Gemm& g, DType t, void* dinp, const void* dout, const void* weight,
                           int64_t N, int64_t C, int64_t OC, int64_t ld_dout, float alpha,
                           const void* gelu_pre, float* dbias_gelu, float* bias_scratch,
                           const LinearOptions& o, cudaStream_t s) {
  // dinp^T (C x N) = W^T... : op(A) = weight as stored (C x OC column-major), B = dout^T.
  GemmCall c = product(false, false, C, N, OC, weight, C, dout, ld_dout, dinp, C, t, t);
  c.alpha = alpha;
  if (gelu_pre && o.fused_dgelu) {
    GemmCall fused = c;
    fused.aux = const_cast<void*>(gelu_pre);
    fused.ld_aux = C;
    if (dbias_gelu && o.fused_bgrad && run_with(g, fused, Epilogue::dgelu_bgrad, dbias_gelu, s))
      return;
    if (run_with(g, fused, Epilogue::dgelu, nullptr, s)) {
      if (dbias_gelu) bias_grad(t, dbias_gelu, dinp, N, C, false, bias_scratch, s);
      return;
    }
  }
  if (!run_with(g, c, Epilogue::none, nullptr, s))
    no_algorithm("linear backward (input)", c.m, c.n, c.k);
  dgelu_after(t, dinp, gelu_pre, dbias_gelu, bias_scratch, N, C, s);
}

void linear_backward_weight(Gemm& g, DType t, float* dweight, float* dbias, const void* dout,
                            const void* inp, int64_t N, int64_t C, int64_t OC, int64_t ld_dout,
                            float alpha, float* bias_scratch, const LinearOptions& o,
                            cudaStream_t s) {
  // dweight^T (C x OC) += inp^T (C x N) @ dout (N x OC): A = inp^T as stored, B = dout^T
  // stored (OC x N column-major), transposed.
  AISCALE_CUDA_REQUIRE(dbias == nullptr || (alpha == 1.0f && ld_dout == OC),
                "linear_backward_weight: bias gradient needs alpha = 1 and a packed dout");
  GemmCall c = product(false, true, C, OC, N, inp, C, dout, ld_dout, dweight, C, t, DType::f32);
  c.c = dweight;
  c.ldc = C;
  c.alpha = alpha;
  c.beta = 1.0f;
  if (dbias && o.fused_bgrad && run_with(g, c, Epilogue::bgradb, dbias, s)) return;
  if (!run_with(g, c, Epilogue::none, nullptr, s))
    no_algorithm("linear backward (weight)", c.m, c.n, c.k);
  if (dbias) bias_grad(t, dbias, dout, N, OC, false, bias_scratch, s);
}

// ---------------------------------------------------------------------------------------
// FP8 linear layers (fp8.cuh): the same products with quantised operands, both K-major.

namespace {
GemmCall fp8_product(int64_t m, int64_t n, int64_t k, const Fp8Operand& a, const Fp8Operand& b,
                     void* d, DType cd) {
  // Column-major D (m x n) = A^T B: A stored k x m (lda = k), B stored k x n (ldb = k).
  GemmCall c = product(true, false, m, n, k, a.data, k, b.data, k, d, m, DType::bf16, cd);
  c.fp8 = true;
  c.a_format = a.format;
  c.b_format = b.format;
  c.a_scale = a.scale_inv;
  c.b_scale = b.scale_inv;
  return c;
}
}  // namespace

bool fp8_linear_forward(Gemm& g, DType t, void* out, void* pre_gelu, const Fp8Operand& x,
                        const Fp8Operand& w, const void* bias, const void* residual, int64_t N,
                        int64_t C, int64_t OC, const LinearOptions& o, cudaStream_t s) {
  if (!coverage::fp8_gemm_ok(OC, N, C) || t == DType::f32) return false;
  // out^T (OC x N) = W (C x OC stored, transposed) . x^T (C x N stored).
  GemmCall c = fp8_product(OC, N, C, w, x, out, t);
  c.fast_accum = true;
  return forward_with_epilogues(g, t, c, out, pre_gelu, bias, residual, N, OC, o, s);
}

bool fp8_linear_backward_input(Gemm& g, DType t, void* dinp, const Fp8Operand& dout,
                               const Fp8Operand& w_t, int64_t N, int64_t C, int64_t OC,
                               const void* gelu_pre, float* dbias_gelu, float* bias_scratch,
                               cudaStream_t s) {
  if (!coverage::fp8_gemm_ok(C, N, OC) || t == DType::f32) return false;
  // dinp^T (C x N) = W^T (OC x C stored, transposed) . dout^T (OC x N stored).
  if (!run_with(g, fp8_product(C, N, OC, w_t, dout, dinp, t), Epilogue::none, nullptr, s))
    return false;
  dgelu_after(t, dinp, gelu_pre, dbias_gelu, bias_scratch, N, C, s);
  return true;
}

bool fp8_linear_backward_weight(Gemm& g, float* dweight, const Fp8Operand& dout_t,
                                const Fp8Operand& x_t, int64_t N, int64_t C, int64_t OC,
                                cudaStream_t s) {
  if (!coverage::fp8_gemm_ok(C, OC, N)) return false;
  // dweight^T (C x OC) += x (N x C stored, transposed) . dout (N x OC stored).
  GemmCall c = fp8_product(C, OC, N, x_t, dout_t, dweight, DType::f32);
  c.c = dweight;
  c.ldc = C;
  c.beta = 1.0f;
  return run_with(g, c, Epilogue::none, nullptr, s);
}

}  // namespace aiscale::cuda
