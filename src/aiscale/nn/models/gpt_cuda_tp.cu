// Tensor parallelism of the CUDA GPT model: the all-reduces of a layer, the gradient norm
// over split and replicated tensors, and the whole <-> local vectors (gpt_cuda_tp.cuh).
#include "aiscale/nn/models/gpt_cuda_tp.cuh"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn::detail {
namespace {

// A piece of the local buffer inside one tensor.
struct Chunk {
  int64_t begin;
  int32_t count;
  int32_t replicated;  // 1: the tensor is whole on every rank
};
constexpr int64_t kChunk = 32768;  // values per chunk (one block of 256 threads each)
constexpr int kThreads = 256;

// partials[c] = sum of squares of the values of chunk c inside [lo, hi).
__global__ void chunk_sum_squares(const float* __restrict__ g, const Chunk* __restrict__ chunks,
                                  int64_t lo, int64_t hi, double* __restrict__ partials) {
  __shared__ double scratch[32];
  const Chunk c = chunks[blockIdx.x];
  const int64_t first = c.begin > lo ? c.begin : lo;
  const int64_t last = c.begin + c.count < hi ? c.begin + c.count : hi;
  double acc = 0.0;
  for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
    const double x = g[i];
    acc += x * x;
  }
  acc = cuda::block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// totals[0] = the split tensors' chunks, totals[1] = the replicated ones (one block, each
// thread over a fixed stride of chunks, then a fixed-order block sum).
__global__ void sum_partials(const double* __restrict__ partials, const Chunk* __restrict__ chunks,
                             int64_t n, double* __restrict__ totals) {
  __shared__ double scratch[32];
  double split = 0.0, replicated = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (chunks[i].replicated) replicated += partials[i];
    else split += partials[i];
  }
  split = cuda::block_sum(split, scratch);
  replicated = cuda::block_sum(replicated, scratch);
  if (threadIdx.x == 0) {
    totals[0] = split;
    totals[1] = replicated;
  }
}

}  // namespace

GptCudaTensorParallel::GptCudaTensorParallel(parallel::Communicator& comm,
                                             parallel::Communicator* data,
                                             const GptShardLayout& layout, DType t,
                                             cudaStream_t stream)
    : comm_(comm), data_(data && data->world() > 1 ? data : nullptr), layout_(layout), t_(t),
      stream_(stream) {
  AISCALE_CUDA_REQUIRE(comm.device_stream() != nullptr,
                       "tensor parallelism on GPUs needs a communicator with device collectives "
                       "(NCCL, or MPI or TCP staged through host memory)");
  AISCALE_CUDA_REQUIRE(comm.world() == layout.tp() && comm.rank() == layout.rank(),
                       "the tensor group disagrees with the shard layout");
  AISCALE_CUDA_REQUIRE(!data_ || data_->device_stream() != nullptr,
                       "data parallelism beside tensor parallelism on GPUs needs a communicator "
                       "with device collectives (NCCL, or MPI or TCP staged through host memory)");
  AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&data_done_, cudaEventDisableTiming));
  std::vector<Chunk> table;
  for (const ShardedTensor& s : layout.tensors())
    for (int64_t off = 0; off < s.numel; off += kChunk)
      table.push_back(Chunk{s.offset + off, static_cast<int32_t>(std::min(kChunk, s.numel - off)),
                            s.kind == ShardKind::replicated ? 1 : 0});
  chunks_ = static_cast<int64_t>(table.size());
  AISCALE_CUDA_REQUIRE(chunks_ > 0 && chunks_ < (int64_t{1} << 31), "chunk table size");
  AISCALE_CUDA_CHECK(cudaMalloc(&chunk_table_, table.size() * sizeof(Chunk)));
  AISCALE_CUDA_CHECK(cudaMalloc(&partials_, size_t(chunks_ + 2) * sizeof(double)));
  totals_ = partials_ + chunks_;
  AISCALE_CUDA_CHECK(cudaMallocHost(&host_totals_, 2 * sizeof(double)));
  AISCALE_CUDA_CHECK(cudaMemcpy(chunk_table_, table.data(), table.size() * sizeof(Chunk),
                                cudaMemcpyHostToDevice));
}

GptCudaTensorParallel::~GptCudaTensorParallel() {
  // Leaving on an error, a peer may be gone: no wait (the communicator aborts itself).
  if (std::uncaught_exceptions() == 0) {
    try {
      finish();
    } catch (const std::exception&) {
      // the communicator has reported its failure
    }
  }
  if (chunk_table_) cudaFree(chunk_table_);
  if (partials_) cudaFree(partials_);
  if (host_totals_) cudaFreeHost(host_totals_);
  if (ready_) cudaEventDestroy(ready_);
  if (done_) cudaEventDestroy(done_);
  if (data_done_) cudaEventDestroy(data_done_);
}

// The tensor group's collective `queue(event)` after the work queued on the model's stream
// (the event marks it), and the model's stream waiting for it on the GPU.
template <typename Queue>
void GptCudaTensorParallel::ordered(Queue&& queue) {
  AISCALE_CUDA_CHECK(cudaEventRecord(ready_, stream_));
  queue(static_cast<void*>(ready_));
  comm_.record(done_);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, done_, 0));
}

void GptCudaTensorParallel::allreduce(void* data, int64_t n) {
  ordered([&](void* ready) { comm_.allreduce_sum_after(data, n, t_, ready); });
}

void GptCudaTensorParallel::allgather(void* data, int64_t count) {
  ordered([&](void* ready) { comm_.allgather_after(data, count * int64_t(dtype_size(t_)), ready); });
}

void GptCudaTensorParallel::reduce_scatter(void* data, int64_t count) {
  ordered([&](void* ready) { comm_.reduce_scatter_sum_after(data, count, t_, ready); });
}

void GptCudaTensorParallel::allgather_f32(float* data, int64_t count) {
  ordered([&](void* ready) { comm_.allgather_after(data, count * 4, ready); });
}

void GptCudaTensorParallel::allreduce_f32(float* data, int64_t n) {
  ordered([&](void* ready) { comm_.allreduce_sum_after(data, n, DType::f32, ready); });
}

void GptCudaTensorParallel::finish() {
  comm_.wait();
  if (data_) data_->wait();
}

void GptCudaTensorParallel::sum_gradients(float* grads, int64_t n) {
  if (!data_) return;
  // The collective takes the event's state when it is queued: ready_ serves both groups.
  AISCALE_CUDA_CHECK(cudaEventRecord(ready_, stream_));
  data_->allreduce_sum_after(grads, n, DType::f32, ready_);
  data_->record(data_done_);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, data_done_, 0));
}

double GptCudaTensorParallel::grad_sum_squares(const float* grads) {
  return sum_squares(grads, 0, layout_.size(), false);
}

double GptCudaTensorParallel::sharded_grad_sum_squares(const float* grads, int64_t begin,
                                                       int64_t end) {
  return sum_squares(grads, begin, end, data_ != nullptr);
}

double GptCudaTensorParallel::range_grad_sum_squares(const float* grads, int64_t begin,
                                                     int64_t end) {
  return sum_squares(grads, begin, end, false);
}

double GptCudaTensorParallel::sum_squares(const float* grads, int64_t begin, int64_t end,
                                          bool over_data) {
  chunk_sum_squares<<<static_cast<unsigned>(chunks_), kThreads, 0, stream_>>>(
      grads, static_cast<const Chunk*>(chunk_table_), begin, end, partials_);
  AISCALE_CUDA_LAUNCH_CHECK();
  sum_partials<<<1, 1024, 0, stream_>>>(partials_, static_cast<const Chunk*>(chunk_table_),
                                        chunks_, totals_);
  AISCALE_CUDA_LAUNCH_CHECK();
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(host_totals_, totals_, 2 * sizeof(double),
                                     cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double totals[2] = {host_totals_[0], host_totals_[1]};
  // ZeRO-1: each summed value lies in exactly one data rank's range: the ranges' squares
  // add up over the data group to the whole local buffer's (alike in every data group).
  if (over_data) data_->allreduce_sum(totals, 2);
  double split = totals[0];
  comm_.allreduce_sum(&split, 1);
  // The replicated tensors' gradients are the same on every rank: this rank's count once.
  return split + totals[1];
}

std::vector<float> GptCudaTensorParallel::download(const float* local_dev) {
  std::vector<float> local(static_cast<size_t>(layout_.size()));
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(local.data(), local_dev, local.size() * 4,
                                     cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return local;
}

void GptCudaTensorParallel::gather(const float* local_dev, float* full_host) {
  finish();
  gather_host(download(local_dev).data(), full_host);
}

void GptCudaTensorParallel::gather_host(const float* local, float* full_host) {
  const int64_t n = layout_.config().num_params();
  std::fill(full_host, full_host + n, 0.0f);
  // Each value is written by one rank (the replicated ones by rank 0), zeros elsewhere:
  // the sum over the ranks is exact.
  layout_.place(local, full_host, layout_.rank() == 0);
  comm_.allreduce_sum(full_host, n);
}

void GptCudaTensorParallel::scatter(const float* full_host, float* local_dev) {
  finish();
  std::vector<float> local(static_cast<size_t>(layout_.size()));
  layout_.extract(full_host, local.data());
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(local_dev, local.data(), local.size() * 4,
                                     cudaMemcpyHostToDevice, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool GptCudaTensorParallel::same_on_every_rank(uint64_t hash) {
  uint64_t first = hash;  // rank 0's, sent to every rank
  comm_.broadcast_bytes(&first, sizeof first, 0);
  double differ = first != hash ? 1.0 : 0.0;
  comm_.allreduce_sum(&differ, 1);
  return differ == 0.0;
}

}  // namespace aiscale::nn::detail
