// cuDNN's fused training batch norm for one NHWC layer (batchnorm_cudnn.cuh).
#include "aiscale/ops/vision/cuda/batchnorm_cudnn.cuh"

#include <string>

#include "aiscale/ops/cuda/common.cuh"

#if AISCALE_HAVE_CUDNN
#include <cudnn.h>

#include "aiscale/ops/cuda/cudnn_backend.cuh"
#endif

namespace aiscale::cuda::vision {

#if AISCALE_HAVE_CUDNN

namespace {

void check(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  throw Error(std::string("cuDNN batch norm: ") + what + " failed (" + cudnnGetErrorString(st) +
              ")");
}

using cudnn_backend::data_type;

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

cudnnBatchNormOps_t ops_of(bool relu, bool add) {
  return add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
             : relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

// The descriptors of one layer at one batch.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  Descs() {
    check(cudnnCreateTensorDescriptor(&x), "descriptor");
    check(cudnnCreateTensorDescriptor(&param), "descriptor");
    check(cudnnCreateActivationDescriptor(&act), "descriptor");
    check(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
          "activation descriptor");
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(param);
    cudnnDestroyActivationDescriptor(act);
  }
  void set(DType t, int64_t n, int64_t H, int64_t W, int64_t C) {
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, data_type(t), int(n), int(C), int(H),
                                     int(W)),
          "tensor descriptor");
    check(cudnnDeriveBNTensorDescriptor(param, x, kMode), "parameter descriptor");
  }
};

}  // namespace

struct CudnnBatchNorm::Impl {
  cudnnHandle_t handle = nullptr;
  DType t = DType::f32;
  int64_t N = 0, H = 0, W = 0, C = 0, n = -1;
  bool relu = false, add = false;
  cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  size_t ws_limit = 0, reserve_limit = 0, ws = 0, reserve = 0;
  Descs d;

  void ensure(int64_t batch) {
    if (batch == n) return;
    if (batch < 1 || batch > N)
      throw Error("cuDNN batch norm: batch " + std::to_string(batch) + " outside 1.." +
                  std::to_string(N));
    d.set(t, batch, H, W, C);
    cudnnActivationDescriptor_t act = relu || add ? d.act : nullptr;
    check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
              handle, kMode, ops, d.x, add ? d.x : nullptr, d.x, d.param, act, &ws),
          "forward workspace size");
    size_t bws = 0;
    check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, kMode, ops, d.x, d.x, d.x,
                                                            add ? d.x : nullptr, d.x, d.param,
                                                            act, &bws),
          "backward workspace size");
    ws = std::max(ws, bws);
    check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, ops, act, d.x,
                                                               &reserve),
          "reserve size");
    if (ws > ws_limit || reserve > reserve_limit)
      throw Error("cuDNN batch norm: needs " + std::to_string(ws) + " B of workspace and " +
                  std::to_string(reserve) + " B of reserve, more than given");
    n = batch;
  }
};

size_t CudnnBatchNorm::reserve_bytes_for(CudnnContext& ctx, DType t, int64_t N, int64_t H,
                                         int64_t W, int64_t C, bool relu, bool add) {
  Descs d;
  d.set(t, N, H, W, C);
  size_t bytes = 0;
  check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            static_cast<cudnnHandle_t>(ctx.handle()), kMode, ops_of(relu, add),
            relu || add ? d.act : nullptr, d.x, &bytes),
        "reserve size");
  return bytes;
}

CudnnBatchNorm::CudnnBatchNorm(CudnnContext& ctx, DType t, int64_t N, int64_t H, int64_t W,
                               int64_t C, bool relu, bool add, const BatchNormBuffers& probe,
                               void* dx, void* dz, float* dgamma, float* dbeta, const void* dy,
                               void* workspace, size_t workspace_bytes, void* reserve,
                               size_t reserve_bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.handle = static_cast<cudnnHandle_t>(ctx.handle());
  m.t = t;
  m.N = N, m.H = H, m.W = W, m.C = C;
  m.relu = relu || add;
  m.add = add;
  m.ops = ops_of(relu, add);
  m.ws_limit = workspace_bytes;
  m.reserve_limit = reserve_bytes;
  m.ensure(N);
  cudaStream_t s = nullptr;
  check(cudnnGetStream(m.handle, &s), "stream");
  forward(probe, 0.1f, 1e-5f, N, workspace, reserve, s);
  backward(dx, add ? dz : nullptr, dgamma, dbeta, dy, probe, 1e-5f, N, false, workspace, reserve,
           s);
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
}

CudnnBatchNorm::~CudnnBatchNorm() = default;

void CudnnBatchNorm::forward(const BatchNormBuffers& b, float momentum, float eps, int64_t n,
                             void* workspace, void* reserve, cudaStream_t s) {
  Impl& m = *impl_;
  m.ensure(n);
  check(cudnnSetStream(m.handle, s), "cudnnSetStream");
  const float one = 1.f, zero = 0.f;
  check(cudnnBatchNormalizationForwardTrainingEx(
            m.handle, kMode, m.ops, &one, &zero, m.d.x, b.x, m.add ? m.d.x : nullptr, b.z, m.d.x,
            b.y, m.d.param, b.gamma, b.beta, double(momentum), b.running_mean, b.running_var,
            double(eps), b.save_mean, b.save_rstd, m.relu ? m.d.act : nullptr, workspace, m.ws,
            reserve, m.reserve),
        "forward");
}

void CudnnBatchNorm::backward(void* dx, void* dz, float* dgamma, float* dbeta, const void* dy,
                              const BatchNormBuffers& b, float eps, int64_t n,
                              bool accumulate_dx, void* workspace, void* reserve,
                              cudaStream_t s) {
  Impl& m = *impl_;
  m.ensure(n);
  check(cudnnSetStream(m.handle, s), "cudnnSetStream");
  const float one = 1.f, data_beta = accumulate_dx ? 1.f : 0.f;
  check(cudnnBatchNormalizationBackwardEx(
            m.handle, kMode, m.ops, &one, &data_beta, &one, &one, m.d.x, b.x, m.d.x, b.y, m.d.x,
            dy, m.add ? m.d.x : nullptr, dz, m.d.x, dx, m.d.param, b.gamma, b.beta, dgamma, dbeta,
            double(eps), b.save_mean, b.save_rstd, m.relu ? m.d.act : nullptr, workspace, m.ws,
            reserve, m.reserve),
        "backward");
}

#else  // no cuDNN in this build

struct CudnnBatchNorm::Impl {};
size_t CudnnBatchNorm::reserve_bytes_for(CudnnContext&, DType, int64_t, int64_t, int64_t,
                                         int64_t, bool, bool) {
  throw Error("this aiscale was built without cuDNN");
}
CudnnBatchNorm::CudnnBatchNorm(CudnnContext&, DType, int64_t, int64_t, int64_t, int64_t, bool,
                               bool, const BatchNormBuffers&, void*, void*, float*, float*,
                               const void*, void*, size_t, void*, size_t) {
  throw Error("this aiscale was built without cuDNN");
}
CudnnBatchNorm::~CudnnBatchNorm() = default;
void CudnnBatchNorm::forward(const BatchNormBuffers&, float, float, int64_t, void*, void*,
                             cudaStream_t) {
  throw Error("this aiscale was built without cuDNN");
}
void CudnnBatchNorm::backward(void*, void*, float*, float*, const void*, const BatchNormBuffers&,
                              float, int64_t, bool, void*, void*, cudaStream_t) {
  throw Error("this aiscale was built without cuDNN");
}

#endif

}  // namespace aiscale::cuda::vision
