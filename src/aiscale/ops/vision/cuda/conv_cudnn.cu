// cuDNN convolutions for the vision path (conv_cudnn.cuh).
#include "aiscale/ops/vision/cuda/conv_cudnn.cuh"

#include <algorithm>
#include <array>
#include <string>

#include "aiscale/core/env.h"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/vision/cuda/conv_cudnn_graph.cuh"

#if AISCALE_HAVE_CUDNN
#include <cudnn.h>

#include "aiscale/ops/cuda/cudnn_backend.cuh"
#endif

namespace aiscale::cuda::vision {

#if AISCALE_HAVE_CUDNN

namespace {

void check(cudnnStatus_t st, const char* what) { cudnn_backend::check(st, "cuDNN convolution", what); }

// The first of the timed candidates that ran (the fastest) into algo and ws; returns its
// time in milliseconds.
template <typename Perf, typename Algo>
float take_first_success(const Perf* perf, int count, Algo& algo, size_t& ws, const char* what) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      algo = perf[i].algo;
      ws = perf[i].memory;
      return perf[i].time;
    }
  }
  throw Error(std::string("cuDNN convolution: no ") + what + " algorithm runs this shape");
}

using cudnn_backend::data_type;

}  // namespace

bool vision_cudnn_compiled() { return true; }

CudnnContext::CudnnContext(cudaStream_t stream) {
  cudnnHandle_t h = nullptr;
  check(cudnnCreate(&h), "cudnnCreate");
  handle_ = h;
  check(cudnnSetStream(h, stream), "cudnnSetStream");
}

CudnnContext::~CudnnContext() {
  if (handle_) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

struct CudnnConv::Impl {
  cudnnHandle_t handle = nullptr;
  DType t = DType::f32;
  bool tf32 = false;
  ConvGeometry g;
  bool backward_data = false;
  size_t limit = 0;
  int64_t n = -1;  // batch the descriptors and algorithms are set for
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t ws_fwd = 0, ws_data = 0, ws_filter = 0;
  // The searched choice at the full batch, restored when a call returns to it.
  cudnnConvolutionFwdAlgo_t found_fwd{};
  cudnnConvolutionBwdDataAlgo_t found_data{};
  cudnnConvolutionBwdFilterAlgo_t found_filter{};
  size_t found_ws_fwd = 0, found_ws_data = 0, found_ws_filter = 0;
  // Graph-API engines that ran faster than the legacy choice at the full batch (null where
  // none did): forward; backward-data overwriting, accumulating; backward-filter likewise.
  enum Slot { kFwd, kData, kDataAcc, kFilter, kFilterAcc, kSlots };
  std::array<std::unique_ptr<ConvGraphPlan>, kSlots> graph;
  int graph_used() const {
    return int(std::count_if(graph.begin(), graph.end(), [](const auto& p) { return p != nullptr; }));
  }

  ConvGraphPlan* graph_plan(Slot slot, int64_t batch) const {
    return batch == g.N ? graph[size_t(slot)].get() : nullptr;
  }

  // Runs the graph engine kept for `slot` where it takes batch n and returns true; else
  // readies the legacy algorithms for batch n on stream s and returns false.
  bool graph_ran(Slot slot, int64_t n, void* out, const void* a, const void* b, void* workspace,
                 cudaStream_t s) {
    if (ConvGraphPlan* p = graph_plan(slot, n); p && p->run(out, a, b, workspace, s)) return true;
    ensure_batch(n);
    check(cudnnSetStream(handle, s), "cudnnSetStream");
    return false;
  }

  cudnnMathType_t math() const {
    if (t != DType::f32) return CUDNN_TENSOR_OP_MATH;
    return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  }

  void set_batch(int64_t batch) {
    const cudnnDataType_t dt = data_type(t);
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, dt, int(batch), int(g.C), int(g.H),
                                     int(g.W)),
          "input descriptor");
    check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, dt, int(batch), int(g.OC),
                                     int(g.OH()), int(g.OW())),
          "output descriptor");
    n = batch;
  }

  // Heuristic choice (no timing) for a batch other than the one searched at construction.
  void choose_by_heuristics() {
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t f[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    check(cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y,
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, f),
          "forward heuristics");
    first_within_limit(f, count, fwd, ws_fwd, "forward");
    if (backward_data) {
      cudnnConvolutionBwdDataAlgoPerf_t d[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      check(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                handle, w, y, conv, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, d),
            "backward-data heuristics");
      first_within_limit(d, count, bwd_data, ws_data, "backward-data");
    }
    cudnnConvolutionBwdFilterAlgoPerf_t b[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              handle, x, y, conv, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, b),
          "backward-filter heuristics");
    first_within_limit(b, count, bwd_filter, ws_filter, "backward-filter");
  }

  // The heuristics' first algorithm that runs within the workspace limit, into algo and ws.
  template <typename Perf, typename Algo>
  void first_within_limit(const Perf* perf, int count, Algo& algo, size_t& ws,
                          const char* what) const {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) {
        algo = perf[i].algo, ws = perf[i].memory;
        return;
      }
    }
    throw Error(std::string("cuDNN convolution: no ") + what +
                " algorithm within the workspace");
  }

  void ensure_batch(int64_t batch) {
    if (batch == n) return;
    if (batch < 1 || batch > g.N)
      throw Error("cuDNN convolution: batch " + std::to_string(batch) + " outside 1.." +
                  std::to_string(g.N));
    set_batch(batch);
    if (batch == g.N) {
      fwd = found_fwd, bwd_data = found_data, bwd_filter = found_filter;
      ws_fwd = found_ws_fwd, ws_data = found_ws_data, ws_filter = found_ws_filter;
    } else {
      choose_by_heuristics();
    }
  }
};

CudnnConv::CudnnConv(CudnnContext& ctx, DType t, bool tf32, const ConvGeometry& g,
                     bool backward_data, const ConvBuffers& search, void* workspace,
                     size_t workspace_bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.handle = static_cast<cudnnHandle_t>(ctx.handle());
  m.t = t;
  m.tf32 = tf32;
  m.g = g;
  m.backward_data = backward_data;
  m.limit = workspace_bytes;
  check(cudnnCreateTensorDescriptor(&m.x), "cudnnCreateTensorDescriptor");
  check(cudnnCreateTensorDescriptor(&m.y), "cudnnCreateTensorDescriptor");
  check(cudnnCreateFilterDescriptor(&m.w), "cudnnCreateFilterDescriptor");
  check(cudnnCreateConvolutionDescriptor(&m.conv), "cudnnCreateConvolutionDescriptor");
  check(cudnnSetFilter4dDescriptor(m.w, data_type(t), CUDNN_TENSOR_NHWC, int(g.OC), int(g.C),
                                   int(g.K), int(g.K)),
        "filter descriptor");
  check(cudnnSetConvolution2dDescriptor(m.conv, int(g.pad), int(g.pad), int(g.stride),
                                        int(g.stride), 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT),
        "convolution descriptor");
  check(cudnnSetConvolutionMathType(m.conv, m.math()), "math type");
  m.set_batch(g.N);

  // Time the candidates on the caller's buffers; keep the fastest that succeeded.
  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t f[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  check(cudnnFindConvolutionForwardAlgorithmEx(m.handle, m.x, search.x, m.w, search.w, m.conv,
                                               m.y, search.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                               &count, f, workspace, workspace_bytes),
        "forward algorithm search");
  const float legacy_fwd_ms = take_first_success(f, count, m.fwd, m.ws_fwd, "forward");
  float legacy_data_ms = 0;
  if (backward_data) {
    cudnnConvolutionBwdDataAlgoPerf_t d[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    check(cudnnFindConvolutionBackwardDataAlgorithmEx(
              m.handle, m.w, search.w, m.y, search.y, m.conv, m.x, search.dx,
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, d, workspace, workspace_bytes),
          "backward-data algorithm search");
    legacy_data_ms = take_first_success(d, count, m.bwd_data, m.ws_data, "backward-data");
  }
  cudnnConvolutionBwdFilterAlgoPerf_t b[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  check(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            m.handle, m.x, search.x, m.y, search.y, m.conv, m.w, search.dw,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, b, workspace, workspace_bytes),
        "backward-filter algorithm search");
  const float legacy_filter_ms =
      take_first_success(b, count, m.bwd_filter, m.ws_filter, "backward-filter");
  m.found_fwd = m.fwd, m.found_data = m.bwd_data, m.found_filter = m.bwd_filter;
  m.found_ws_fwd = m.ws_fwd, m.found_ws_data = m.ws_data, m.found_ws_filter = m.ws_filter;
  const float legacy_ms[3] = {legacy_fwd_ms, backward_data ? legacy_data_ms : 0.f, legacy_filter_ms};

  // The graph API's candidates for each direction (and output scaling), kept where one beat
  // the legacy choice by 5 %. AISCALE_CUDNN_CONV_ENGINES=legacy measures without them,
  // =exhaustive times every configuration (conv_cudnn_graph.cuh).
  static const std::string engines = env::choice("AISCALE_CUDNN_CONV_ENGINES");
  if (engines == "legacy") return;
  const ConvSearch how = engines == "exhaustive" ? ConvSearch::exhaustive : ConvSearch::heuristics;
  cudaStream_t s = nullptr;
  check(cudnnGetStream(m.handle, &s), "cudnnGetStream");
  struct Want { Impl::Slot slot; ConvDirection dir; bool acc; int legacy; };
  const Want wants[] = {{Impl::kFwd, ConvDirection::forward, false, 0},
                        {Impl::kData, ConvDirection::backward_data, false, 1},
                        {Impl::kDataAcc, ConvDirection::backward_data, true, 1},
                        {Impl::kFilter, ConvDirection::backward_filter, false, 2},
                        {Impl::kFilterAcc, ConvDirection::backward_filter, true, 2}};
  for (const Want& w : wants) {
    if (w.dir == ConvDirection::backward_data && !backward_data) continue;
    std::unique_ptr<ConvGraphPlan> p = ConvGraphPlan::search(
        m.handle, t, tf32, g, w.dir, w.acc, search, workspace, workspace_bytes, s, how);
    if (p && p->time_ms() < 0.95f * legacy_ms[w.legacy]) {
      m.graph[size_t(w.slot)] = std::move(p);
    }
  }
}

CudnnConv::~CudnnConv() {
  if (!impl_) return;
  cudnnDestroyTensorDescriptor(impl_->x);
  cudnnDestroyTensorDescriptor(impl_->y);
  cudnnDestroyFilterDescriptor(impl_->w);
  cudnnDestroyConvolutionDescriptor(impl_->conv);
}

size_t CudnnConv::workspace_bytes() const {
  size_t bytes = std::max(impl_->ws_fwd, std::max(impl_->ws_data, impl_->ws_filter));
  for (const auto& p : impl_->graph)
    if (p) bytes = std::max(bytes, p->workspace());
  return bytes;
}

std::string CudnnConv::describe() const {
  return "fwd " + std::to_string(int(impl_->fwd)) + " / bwd-data " +
         (impl_->backward_data ? std::to_string(int(impl_->bwd_data)) : std::string("-")) +
         " / bwd-filter " + std::to_string(int(impl_->bwd_filter)) +
         (impl_->graph_used() ? ", " + std::to_string(impl_->graph_used()) + " graph engine(s)" : "");
}

int CudnnConv::graph_engines() const { return impl_->graph_used(); }

void CudnnConv::forward(void* y, const void* x, const void* w, int64_t n, void* workspace,
                        cudaStream_t s) {
  Impl& m = *impl_;
  if (m.graph_ran(Impl::kFwd, n, y, x, w, workspace, s)) return;
  const float one = 1.f, zero = 0.f;
  check(cudnnConvolutionForward(m.handle, &one, m.x, x, m.w, w, m.conv, m.fwd, workspace,
                                m.ws_fwd, &zero, m.y, y),
        "forward");
}

void CudnnConv::backward_data(void* dx, const void* dy, const void* w, int64_t n,
                              bool accumulate, void* workspace, cudaStream_t s) {
  Impl& m = *impl_;
  if (!m.backward_data) throw Error("cuDNN convolution: built without backward-data");
  if (m.graph_ran(accumulate ? Impl::kDataAcc : Impl::kData, n, dx, dy, w, workspace, s)) return;
  const float one = 1.f, beta = accumulate ? 1.f : 0.f;
  check(cudnnConvolutionBackwardData(m.handle, &one, m.w, w, m.y, dy, m.conv, m.bwd_data,
                                     workspace, m.ws_data, &beta, m.x, dx),
        "backward-data");
}

void CudnnConv::backward_filter(void* dw, const void* dy, const void* x, int64_t n,
                                bool accumulate, void* workspace, cudaStream_t s) {
  Impl& m = *impl_;
  if (m.graph_ran(accumulate ? Impl::kFilterAcc : Impl::kFilter, n, dw, dy, x, workspace, s))
    return;
  const float one = 1.f, beta = accumulate ? 1.f : 0.f;
  check(cudnnConvolutionBackwardFilter(m.handle, &one, m.x, x, m.y, dy, m.conv, m.bwd_filter,
                                       workspace, m.ws_filter, &beta, m.w, dw),
        "backward-filter");
}

#else  // no cuDNN in this build

namespace {
[[noreturn]] void no_cudnn() {
  throw Error(
      "this aiscale was built without cuDNN (CMake found no cudnn_graph.h / libcudnn), which "
      "the GPU vision path needs for its convolutions: install cuDNN 9 for the CUDA toolkit "
      "and rebuild (cmake --preset cuda), or train on the CPU (train.device = \"cpu\")");
}
}  // namespace

bool vision_cudnn_compiled() { return false; }
CudnnContext::CudnnContext(cudaStream_t) { no_cudnn(); }
CudnnContext::~CudnnContext() = default;
struct CudnnConv::Impl {};
CudnnConv::CudnnConv(CudnnContext&, DType, bool, const ConvGeometry&, bool, const ConvBuffers&,
                     void*, size_t) {
  no_cudnn();
}
CudnnConv::~CudnnConv() = default;
size_t CudnnConv::workspace_bytes() const { return 0; }
std::string CudnnConv::describe() const { return "no cuDNN"; }
int CudnnConv::graph_engines() const { return 0; }
void CudnnConv::forward(void*, const void*, const void*, int64_t, void*, cudaStream_t) {
  no_cudnn();
}
void CudnnConv::backward_data(void*, const void*, const void*, int64_t, bool, void*,
                              cudaStream_t) {
  no_cudnn();
}
void CudnnConv::backward_filter(void*, const void*, const void*, int64_t, bool, void*,
                                cudaStream_t) {
  no_cudnn();
}

#endif

}  // namespace aiscale::cuda::vision
