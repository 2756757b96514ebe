// cuDNN graph-API convolutions (conv_cudnn_graph.cuh).
#include "aiscale/ops/vision/cuda/conv_cudnn_graph.cuh"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"

#if AISCALE_HAVE_CUDNN
#include <cudnn.h>

#include "aiscale/ops/cuda/cudnn_backend.cuh"
#endif

namespace aiscale::cuda::vision {

#if AISCALE_HAVE_CUDNN

namespace {

using cudnn_backend::data_type;
using cudnn_backend::Desc;
using Dims = std::vector<int64_t>;

// The variant pack's tensors, by role: the activation side (x or dx), the filter (w or
// dw), the output side (y or dy).
enum Uid : int64_t { kAct = 1, kFilter = 2, kOut = 3 };

// An NHWC tensor (dims in cuDNN's N, C, H, W order; the filter's K, C, R, S as KRSC).
Desc nhwc_tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t dt) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const Dims dims{n, c, h, w}, strides{h * w * c, 1, w * c, c};
  const int64_t align = 16;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dims");
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides");
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  d.finalize("convolution tensor " + std::to_string(uid));
  return d;
}

// What tells two engine configurations apart: the engine's global index, then each knob's
// type and chosen value.
std::vector<int64_t> config_key(const Desc& cfg) {
  std::vector<int64_t> key{cudnn_backend::engine_index(cfg)};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return key;
  std::vector<Desc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(choices.back().get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()) != CUDNN_STATUS_SUCCESS)
    return key;
  for (int64_t i = 0; i < std::min(got, count); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, n = 0;
    cudnnBackendGetAttribute(raw[size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                             1, &n, &type);
    cudnnBackendGetAttribute(raw[size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64,
                             1, &n, &value);
    key.push_back(int64_t(type));
    key.push_back(value);
  }
  return key;
}

// Whether the engine behind `cfg` may run: fp32 without TF32 refuses tensor-core engines
// (they round the inputs to TF32) and any that down-convert; engines compiled at run time
// only in an exhaustive search (seconds of start-up per shape).
bool allowed(const Desc& cfg, bool real_fp32, bool runtime_compiled) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               1, &n, &e) != CUDNN_STATUS_SUCCESS)
    return false;
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behaviour{};
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               int64_t(behaviour.size()), &n, behaviour.data()) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n; ++i)
      if (behaviour[size_t(i)] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION && !runtime_compiled)
        return false;
  if (!real_fp32) return true;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               int64_t(notes.size()), &n, notes.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < n; ++i)
    if (notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
        notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
      return false;
  return true;
}

}  // namespace

struct ConvGraphPlan::Impl {
  cudnnHandle_t handle = nullptr;
  ConvDirection dir = ConvDirection::forward;
  Desc act, filter, out, conv, op, graph, plan;
  int64_t workspace = 0, engine = -1;
  float time_ms = 0;
  cudnn_backend::PackCache packs;

  bool execute(void* o, const void* a, const void* b, void* ws, cudaStream_t s) {
    // The roles of (out, a, b) per direction, as (activation side, filter, output side).
    void* act_p = nullptr;
    void* filter_p = nullptr;
    void* out_p = nullptr;
    switch (dir) {
      case ConvDirection::forward:  // y; x, w
        out_p = o, act_p = const_cast<void*>(a), filter_p = const_cast<void*>(b);
        break;
      case ConvDirection::backward_data:  // dx; dy, w
        act_p = o, out_p = const_cast<void*>(a), filter_p = const_cast<void*>(b);
        break;
      case ConvDirection::backward_filter:  // dw; dy, x
        filter_p = o, out_p = const_cast<void*>(a), act_p = const_cast<void*>(b);
        break;
    }
    for (const void* p : {act_p, filter_p, out_p})
      if (reinterpret_cast<uintptr_t>(p) % 16) return false;
    static constexpr std::array<int64_t, 3> kUids{kAct, kFilter, kOut};
    cudnnBackendDescriptor_t pack = packs.get(kUids, std::array<void*, 3>{act_p, filter_p, out_p}, ws);
    cudnn_backend::check(cudnnSetStream(handle, s), "cuDNN convolution", "setting the stream");
    cudnn_backend::check(cudnnBackendExecute(handle, plan.get(), pack), "cuDNN convolution",
                         "running a graph engine");
    return true;
  }
};

ConvGraphPlan::ConvGraphPlan() : impl_(std::make_unique<Impl>()) {}
ConvGraphPlan::~ConvGraphPlan() = default;
float ConvGraphPlan::time_ms() const { return impl_->time_ms; }
size_t ConvGraphPlan::workspace() const { return size_t(impl_->workspace); }
int64_t ConvGraphPlan::engine() const { return impl_->engine; }

bool ConvGraphPlan::run(void* out, const void* in_a, const void* in_b, void* workspace,
                        cudaStream_t s) {
  return impl_->execute(out, in_a, in_b, workspace, s);
}

std::unique_ptr<ConvGraphPlan> ConvGraphPlan::search(void* handle, DType t, bool tf32,
                                                     const ConvGeometry& g, ConvDirection dir,
                                                     bool accumulate, const ConvBuffers& bufs,
                                                     void* workspace, size_t workspace_bytes,
                                                     cudaStream_t s, ConvSearch how) {
  std::unique_ptr<ConvGraphPlan> result(new ConvGraphPlan());
  Impl& m = *result->impl_;
  m.handle = static_cast<cudnnHandle_t>(handle);
  m.dir = dir;
  const cudnnDataType_t dt = data_type(t);
  m.act = nhwc_tensor(kAct, g.N, g.C, g.H, g.W, dt);
  m.filter = nhwc_tensor(kFilter, g.OC, g.C, g.K, g.K, dt);
  m.out = nhwc_tensor(kOut, g.N, g.OC, g.OH(), g.OW(), dt);

  m.conv = Desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  const Dims one{1, 1}, stride{g.stride, g.stride}, pad{g.pad, g.pad};
  m.conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "convolution type");
  m.conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  m.conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "convolution dims");
  m.conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one.data(), "dilations");
  m.conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride.data(), "strides");
  m.conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data(), "paddings");
  m.conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data(), "paddings");
  m.conv.finalize("convolution descriptor");

  // The operation of each direction and its attributes, by the tensors' roles.
  struct OpAttrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t act, filter, out, conv, alpha, beta;
  };
  static const OpAttrs kOps[] = {  // in ConvDirection's order
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
  };
  const OpAttrs& oa = kOps[int(dir)];
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  m.op = Desc(oa.type);
  m.op.set_desc(oa.act, m.act, "convolution activation");
  m.op.set_desc(oa.filter, m.filter, "convolution filter");
  m.op.set_desc(oa.out, m.out, "convolution output");
  m.op.set_desc(oa.conv, m.conv, "convolution descriptor");
  m.op.set(oa.alpha, CUDNN_TYPE_FLOAT, 1, &alpha, "alpha");
  m.op.set(oa.beta, CUDNN_TYPE_FLOAT, 1, &beta, "beta");
  if (m.op.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  m.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t op = m.op.get();
  m.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "graph operation");
  m.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &m.handle, "graph handle");
  if (m.graph.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;

  // The heuristics' ranked list (mode A), then the fallback list: real fp32 finds its
  // non-tensor-core engines mostly in the latter. An exhaustive search adds mode B's list.
  const bool exhaustive = how == ConvSearch::exhaustive;
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendHeurMode_t> modes{CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  if (exhaustive) modes.insert(modes.begin() + 1, CUDNN_HEUR_MODE_B);
  for (cudnnBackendHeurMode_t mode : modes)
    for (Desc& cfg : cudnn_backend::engine_configs(m.graph, mode)) cfgs.push_back(std::move(cfg));
  const int64_t got = int64_t(cfgs.size());

  // The buffers each candidate runs on, in the roles of the direction.
  void* o = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  switch (dir) {
    case ConvDirection::forward: o = bufs.y, a = bufs.x, b = bufs.w; break;
    case ConvDirection::backward_data: o = bufs.dx, a = bufs.y, b = bufs.w; break;
    case ConvDirection::backward_filter: o = bufs.dw, a = bufs.y, b = bufs.x; break;
  }
  if (!o || !a || !b) return nullptr;
  const bool real_fp32 = t == DType::f32 && !tf32;
  const int candidates = exhaustive ? int(got) : real_fp32 ? 12 : 6;
  cudaEvent_t start = nullptr, stop = nullptr;
  AISCALE_CUDA_CHECK(cudaEventCreate(&start));
  AISCALE_CUDA_CHECK(cudaEventCreate(&stop));
  auto timed = [&](Impl& c) {  // one run of c's plan, in ms (negative: it did not run)
    AISCALE_CUDA_CHECK(cudaEventRecord(start, s));
    const bool ran = c.execute(o, a, b, workspace, s);
    AISCALE_CUDA_CHECK(cudaEventRecord(stop, s));
    AISCALE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ran ? ms : -1.0f;
  };
  float best = -1;
  int tried = 0;
  // Configurations already timed (the lists overlap): one per engine, or in an exhaustive
  // search one per engine and knob choice.
  std::vector<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < got && tried < candidates; ++i) {
    if (!allowed(cfgs[size_t(i)], real_fp32, exhaustive)) continue;
    const int64_t engine = cudnn_backend::engine_index(cfgs[size_t(i)]);
    const std::vector<int64_t> key = exhaustive ? config_key(cfgs[size_t(i)]) : std::vector<int64_t>{engine};
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &m.handle, "plan handle");
    plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)], "plan engine");
    if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
    int64_t ws = 0, n = 0;
    if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
        ws < 0 || size_t(ws) > workspace_bytes)
      continue;
    ++tried;
    Impl c;
    c.handle = m.handle;
    c.dir = dir;
    c.plan = std::move(plan);
    float ms = timed(c);  // the first run also loads the kernel
    if (ms < 0) continue;
    if (best < 0 || ms < 2 * best) ms = std::min(ms, timed(c));
    if (best < 0 || ms < best) {
      best = ms;
      m.plan = std::move(c.plan);
      m.workspace = ws;
      m.engine = engine;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best < 0) return nullptr;
  m.time_ms = best;
  return result;
}

#else  // no cuDNN in this build

struct ConvGraphPlan::Impl {};
ConvGraphPlan::ConvGraphPlan() = default;
ConvGraphPlan::~ConvGraphPlan() = default;
std::unique_ptr<ConvGraphPlan> ConvGraphPlan::search(void*, DType, bool, const ConvGeometry&,
                                                     ConvDirection, bool, const ConvBuffers&,
                                                     void*, size_t, cudaStream_t, ConvSearch) {
  return nullptr;
}
float ConvGraphPlan::time_ms() const { return 0; }
size_t ConvGraphPlan::workspace() const { return 0; }
int64_t ConvGraphPlan::engine() const { return -1; }
bool ConvGraphPlan::run(void*, const void*, const void*, void*, cudaStream_t) { return false; }

#endif

}  // namespace aiscale::cuda::vision
