// cuDNN fused attention through the backend (graph) API: the operation graphs below are
// the scaled-dot-product patterns that cuDNN 9's fused flash-attention engines match
// (matmul, scale, causal mask, softmax with statistics, matmul; and the backward
// pattern). No cuDNN frontend (not packaged for Debian): descriptors are built directly.
#include "aiscale/ops/cuda/cudnn_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"

#if AISCALE_HAVE_CUDNN
#include <cudnn.h>

#include "aiscale/ops/cuda/cudnn_backend.cuh"
#endif

namespace aiscale::cuda {

#if AISCALE_HAVE_CUDNN

namespace {

using cudnn_backend::Desc;

void check(cudnnStatus_t st, const std::string& what) {
  cudnn_backend::check(st, "cuDNN attention", what);
}

using Dims = std::vector<int64_t>;

// Builds one operation graph: tensors by unique id, operations in order.
class GraphBuilder {
 public:
  // A real (or by-value scalar) tensor with a caller-chosen uid.
  int64_t tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t dt,
                 bool is_virtual = false, bool by_value = false) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t n = static_cast<int64_t>(dims.size());
    const int64_t align = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dims.data(), "tensor dims");
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, strides.data(), "tensor strides");
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual flag");
    if (by_value) {
      const bool bv = true;
      d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv, "tensor by-value flag");
    }
    d.finalize("tensor " + std::to_string(uid));
    tensors_.emplace(uid, std::move(d));
    return uid;
  }
  // An intermediate the engine keeps on chip.
  int64_t virt(const Dims& dims, const Dims& strides, cudnnDataType_t dt) {
    return tensor(next_virtual_++, dims, strides, dt, true);
  }
  int64_t scalar(int64_t uid, cudnnDataType_t dt) {
    return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, dt, false, true);
  }

  // y = mode(x[, b][, t]); prec is the math precision.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    pw.finalize("pointwise descriptor " + std::to_string(int(mode)));
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise op");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(x), "pointwise x");
    if (b >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(b), "pointwise b");
    if (t >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(t), "pointwise t");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(y), "pointwise y");
    op.finalize("pointwise operation " + std::to_string(int(mode)) + " -> " + std::to_string(y));
    keep_.push_back(std::move(pw));
    ops_.push_back(std::move(op));
  }
  // y = reduce over the dimensions where y has extent 1.
  void reduction(cudnnReduceTensorOp_t mode, int64_t x, int64_t y) {
    Desc rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    rd.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction type");
    rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
           "reduction operator");
    rd.finalize("reduction descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, "reduction op");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(x), "reduction x");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(y), "reduction y");
    op.finalize("reduction operation -> " + std::to_string(y));
    keep_.push_back(std::move(rd));
    ops_.push_back(std::move(op));
  }
  // c = a b, batched over the leading dimensions.
  void matmul(int64_t a, int64_t b, int64_t c) {
    Desc md(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    md.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul type");
    md.finalize("matmul descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(a), "matmul a");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(b), "matmul b");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(c), "matmul c");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, md, "matmul op");
    op.finalize("matmul operation -> " + std::to_string(c));
    keep_.push_back(std::move(md));
    ops_.push_back(std::move(op));
  }
  // y: the same values as x under other dims / strides (a transpose view).
  void reshape(int64_t x, int64_t y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(x), "reshape x");
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(y), "reshape y");
    op.finalize("reshape operation -> " + std::to_string(y));
    ops_.push_back(std::move(op));
  }

  // The finalised operation graph. The builder must outlive it (it owns the tensors).
  Desc graph(cudnnHandle_t handle, const char* name) {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc& d : ops_) raw.push_back(d.get());
    Desc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
          static_cast<int64_t>(raw.size()), raw.data(), "graph operations");
    g.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
    g.finalize(std::string(name) + " operation graph");
    return g;
  }

 private:
  const Desc& at(int64_t uid) const {
    auto it = tensors_.find(uid);
    if (it == tensors_.end()) throw Error("cuDNN attention: internal: no tensor " + std::to_string(uid));
    return it->second;
  }
  std::map<int64_t, Desc> tensors_;
  std::vector<Desc> keep_;
  std::vector<Desc> ops_;
  int64_t next_virtual_ = 1000;
};

// Unique ids of the real tensors (the variant pack's keys).
enum Uid : int64_t {
  kQ = 1, kKt = 2, kV = 3, kO = 4, kStats = 5, kScale = 6, kNegInf = 7,
  kDO = 8, kDQ = 9, kDK = 10, kDV = 11, kSoftmaxSum = 12, kDQAccum = 13, kOne = 14,
  kVt = 15,
};

struct Plan {
  GraphBuilder builder;
  Desc graph;
  Desc plan;
  int64_t workspace = 0;
  int64_t engine = -1;
  cudnn_backend::PackCache packs;
};

// Heuristics (mode A, then the fallback list); the first configuration that finalises.
void make_plan(Plan& p, cudnnHandle_t handle, const char* name) {
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> cfgs = cudnn_backend::engine_configs(p.graph, mode);
    const int64_t got = int64_t(cfgs.size());
    for (int64_t i = 0; i < got; ++i) {
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
      plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)], "plan engine");
      const cudnnStatus_t st = plan.try_finalize();
      if (st != CUDNN_STATUS_SUCCESS) {
        tried += (tried.empty() ? "" : "; ") + cudnn_backend::message(st);
        continue;
      }
      int64_t n = 0;
      check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &p.workspace),
            "reading the plan's workspace size");
      p.engine = cudnn_backend::engine_index(cfgs[size_t(i)]);
      p.plan = std::move(plan);
      return;
    }
  }
  throw Error(std::string("cuDNN attention: no engine runs the ") + name +
              " graph on this GPU and cuDNN version" + (tried.empty() ? "" : " (" + tried + ")") +
              "; use AISCALE_CUDA_ATTENTION=flash");
}

// Runs plan `p` with the data pointers `ptrs` for the tensors `uids` (same order).
template <size_t N>
void execute(cudnnHandle_t handle, Plan& p, const std::array<int64_t, N>& uids,
             const std::array<void*, N>& ptrs, void* workspace, cudaStream_t s,
             const char* name) {
  cudnnBackendDescriptor_t pack = p.packs.get(uids, ptrs, workspace);
  check(cudnnSetStream(handle, s), "setting the stream");
  check(cudnnBackendExecute(handle, p.plan.get(), pack), std::string("running ") + name);
}

}  // namespace

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  DType t;
  // KVH: key/value heads (grouped-query attention when fewer than NH); C = NH HS the queries'
  // width, KC = KVH HS the keys' and the values', W = C + 2 KC a row of the fused QKV.
  int64_t B, T, NH, HS, C, KVH, KC, W;
  float scale, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  Plan fwd, bwd;

  ~Impl() {
    if (handle) cudnnDestroy(handle);
  }

  void build() {
    const cudnnDataType_t io = t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const int64_t D = HS, C3 = W;
    const Dims qkv_dims{B, NH, T, D}, qkv_str{T * C3, D, C3, 1};
    // K and V: KVH heads; query head h reads head h / (NH / KVH) (the matmuls broadcast).
    const Dims kv_dims{B, KVH, T, D};
    const Dims kt_dims{B, KVH, D, T}, kt_str{T * C3, D, 1, C3};
    const bool grouped = KVH != NH;
    const Dims o_str{T * C, D, C, 1};
    const Dims stat_dims{B, NH, T, 1}, stat_str{NH * T, T, 1, 1};
    const Dims s_dims{B, NH, T, T}, s_str{NH * T * T, T * T, T, 1};
    const Dims st_str{NH * T * T, T * T, 1, T};  // a (T, T) matrix read transposed

    // The causal mask: keep where row (query) >= column (key); -inf elsewhere.
    auto causal = [&](GraphBuilder& g, int64_t s) {
      const int64_t row = g.virt(s_dims, s_str, CUDNN_DATA_INT32);
      const int64_t col = g.virt(s_dims, s_str, CUDNN_DATA_INT32);
      g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, -1, -1, row, f32, 2);
      g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, -1, -1, col, f32, 3);
      const int64_t keep = g.virt(s_dims, s_str, CUDNN_DATA_BOOLEAN);
      g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, -1, keep, CUDNN_DATA_BOOLEAN);
      const int64_t masked = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, kNegInf, keep, masked);
      return masked;
    };

    {  // forward: O = softmax(causal(scale Q K^T)) V, stats = max + log(sum exp)
      GraphBuilder& g = fwd.builder;
      g.tensor(kQ, qkv_dims, qkv_str, io);
      g.tensor(kKt, kt_dims, kt_str, io);
      g.tensor(kV, kv_dims, qkv_str, io);
      g.tensor(kO, qkv_dims, o_str, io);
      g.tensor(kStats, stat_dims, stat_str, f32);
      g.scalar(kScale, f32);
      g.scalar(kNegInf, f32);
      const int64_t s = g.virt(s_dims, s_str, f32);
      g.matmul(kQ, kKt, s);
      const int64_t ss = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_MUL, s, kScale, -1, ss);
      const int64_t sm = causal(g, ss);
      const int64_t mx = g.virt(stat_dims, stat_str, f32);
      g.reduction(CUDNN_REDUCE_TENSOR_MAX, sm, mx);
      const int64_t sub = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_SUB, sm, mx, -1, sub);
      const int64_t ex = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_EXP, sub, -1, -1, ex);
      const int64_t sum = g.virt(stat_dims, stat_str, f32);
      g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
      const int64_t lg = g.virt(stat_dims, stat_str, f32);
      g.pointwise(CUDNN_POINTWISE_LOG, sum, -1, -1, lg);
      g.pointwise(CUDNN_POINTWISE_ADD, mx, lg, -1, kStats);
      const int64_t p = g.virt(s_dims, s_str, io);
      g.pointwise(CUDNN_POINTWISE_DIV, ex, sum, -1, p);
      g.matmul(p, kV, kO);
      fwd.graph = g.graph(handle, "forward");
      make_plan(fwd, handle, "forward");
    }
    {  // backward
      GraphBuilder& g = bwd.builder;
      g.tensor(kQ, qkv_dims, qkv_str, io);
      g.tensor(kKt, kt_dims, kt_str, io);
      g.tensor(kVt, kt_dims, kt_str, io);
      g.tensor(kO, qkv_dims, o_str, io);
      g.tensor(kStats, stat_dims, stat_str, f32);
      g.scalar(kScale, f32);
      g.scalar(kNegInf, f32);
      g.scalar(kOne, f32);
      g.tensor(kDO, qkv_dims, o_str, io);
      g.tensor(kDQ, qkv_dims, qkv_str, io);
      g.tensor(kDK, kv_dims, qkv_str, io);
      g.tensor(kDV, kv_dims, qkv_str, io);
      g.tensor(kSoftmaxSum, stat_dims, stat_str, f32);
      g.tensor(kDQAccum, qkv_dims, Dims{NH * T * D, T * D, D, 1}, f32);

      // softmax_sum = rowsum(dO * O)
      const int64_t dOO = g.virt(qkv_dims, Dims{NH * T * D, T * D, NH * D, 1}, f32);
      g.pointwise(CUDNN_POINTWISE_MUL, kDO, kO, -1, dOO);
      const int64_t rs = g.virt(stat_dims, stat_str, f32);
      g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rs);
      g.pointwise(CUDNN_POINTWISE_MUL, rs, kOne, -1, kSoftmaxSum);
      // P = exp(causal(scale Q K^T - stats))
      const int64_t s = g.virt(s_dims, s_str, f32);
      g.matmul(kQ, kKt, s);
      const int64_t ss = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_MUL, s, kScale, -1, ss);
      const int64_t sub = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_SUB, ss, kStats, -1, sub);
      const int64_t sm = causal(g, sub);
      const int64_t p = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_EXP, sm, -1, -1, p);
      // dV = P^T dO
      const int64_t pt = g.virt(s_dims, st_str, io);
      g.reshape(p, pt);
      // Grouped-query: every query head's dV, then summed over each group (the same for dK).
      const Dims full_str{NH * T * D, T * D, D, 1};
      auto per_head_then_sum = [&](int64_t a, int64_t b, int64_t out) {
        if (!grouped) {
          g.matmul(a, b, out);
          return;
        }
        const int64_t full = g.virt(qkv_dims, full_str, io);
        g.matmul(a, b, full);
        g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
      };
      per_head_then_sum(pt, kDO, kDV);
      // dS = scale P (dO V^T - softmax_sum)
      const int64_t dp = g.virt(s_dims, s_str, f32);
      g.matmul(kDO, kVt, dp);
      const int64_t dps = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_SUB, dp, kSoftmaxSum, -1, dps);
      const int64_t ds0 = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_MUL, dps, p, -1, ds0);
      const int64_t ds = g.virt(s_dims, s_str, f32);
      g.pointwise(CUDNN_POINTWISE_MUL, ds0, kScale, -1, ds);
      // dK = dS^T Q
      const int64_t dst = g.virt(s_dims, st_str, io);
      g.reshape(ds, dst);
      per_head_then_sum(dst, kQ, kDK);
      // dQ = dS K (fp32 accumulator, then converted)
      const int64_t k = g.virt(kv_dims, qkv_str, io);
      g.reshape(kKt, k);
      g.matmul(ds, k, kDQAccum);
      g.pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, -1, -1, kDQ);
      bwd.graph = g.graph(handle, "backward");
      make_plan(bwd, handle, "backward");
    }
  }
};

bool cudnn_attention_compiled() { return true; }
int64_t cudnn_runtime_version() { return static_cast<int64_t>(cudnnGetVersion()); }

CudnnAttention::CudnnAttention(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                               int64_t KVH)
    : impl_(std::make_unique<Impl>()) {
  if (KVH <= 0) KVH = NH;
  if (NH % KVH != 0)
    throw Error("cuDNN attention: " + std::to_string(NH) + " query heads do not group over " +
                std::to_string(KVH) + " key/value heads");
  if (t != DType::bf16 && t != DType::f16)
    throw Error(std::string("cuDNN attention needs bf16 or fp16, not ") + dtype_str(t) +
                "; use AISCALE_CUDA_ATTENTION=flash or simple");
  Impl& m = *impl_;
  m.t = t;
  m.B = B;
  m.T = T;
  m.NH = NH;
  m.HS = HS;
  m.C = NH * HS;
  m.KVH = KVH;
  m.KC = KVH * HS;
  m.W = m.C + 2 * m.KC;
  m.scale = 1.0f / std::sqrt(static_cast<float>(HS));
  check(cudnnCreate(&m.handle), "creating a handle");
  m.build();
}

CudnnAttention::~CudnnAttention() = default;

size_t CudnnAttention::workspace_bytes() const {
  return size_t(std::max(impl_->fwd.workspace, impl_->bwd.workspace));
}

std::string CudnnAttention::describe() const {
  return "cudnn (engines " + std::to_string(impl_->fwd.engine) + " / " +
         std::to_string(impl_->bwd.engine) + ", cuDNN " + std::to_string(cudnn_runtime_version()) +
         ", workspace " + std::to_string(workspace_bytes()) + " B)";
}

void CudnnAttention::forward(void* out, float* stats, const void* qkv, void* workspace,
                             cudaStream_t s) {
  Impl& m = *impl_;
  auto* base = static_cast<char*>(const_cast<void*>(qkv));
  // Bytes (bf16 / fp16) from a row's start to its K, and from K to V.
  const int64_t cb = m.C * 2, kb = m.KC * 2;
  static constexpr std::array<int64_t, 7> kUids{kQ, kKt, kV, kO, kStats, kScale, kNegInf};
  execute(m.handle, m.fwd, kUids,
          std::array<void*, 7>{base, base + cb, base + cb + kb, out, stats, &m.scale, &m.neg_inf},
          workspace, s, "the forward plan");
}

void CudnnAttention::backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* stats, float* dq_accum, float* softmax_sum,
                              void* workspace, cudaStream_t s) {
  Impl& m = *impl_;
  auto* base = static_cast<char*>(const_cast<void*>(qkv));
  auto* dbase = static_cast<char*>(dqkv);
  const int64_t cb = m.C * 2, kb = m.KC * 2;
  static constexpr std::array<int64_t, 14> kUids{
      kQ, kKt, kVt, kO, kStats, kScale, kNegInf, kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum};
  execute(m.handle, m.bwd, kUids,
          std::array<void*, 14>{base, base + cb, base + cb + kb, const_cast<void*>(out),
                                const_cast<float*>(stats), &m.scale, &m.neg_inf, &m.one,
                                const_cast<void*>(dout), dbase, dbase + cb, dbase + cb + kb,
                                softmax_sum, dq_accum},
          workspace, s, "the backward plan");
}

#else  // no cuDNN in this build

struct CudnnAttention::Impl {};

bool cudnn_attention_compiled() { return false; }
int64_t cudnn_runtime_version() { return 0; }

CudnnAttention::CudnnAttention(DType, int64_t, int64_t, int64_t, int64_t, int64_t) {
  throw Error(
      "this build has no cuDNN (CMake found no cudnn.h / libcudnn); rebuild with cuDNN 9 "
      "installed, or use AISCALE_CUDA_ATTENTION=flash");
}
CudnnAttention::~CudnnAttention() = default;
size_t CudnnAttention::workspace_bytes() const { return 0; }
std::string CudnnAttention::describe() const { return "cudnn (not built)"; }
void CudnnAttention::forward(void*, float*, const void*, void*, cudaStream_t) {}
void CudnnAttention::backward(void*, const void*, const void*, const void*, const float*, float*,
                              float*, void*, cudaStream_t) {}

#endif

}  // namespace aiscale::cuda
