#include "aiscale/parallel/nccl/device_algorithms.h"

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/parallel/algorithms/ring_segments.h"

namespace aiscale::parallel {
namespace {

using algorithms::RingSegments;

__global__ void add_into_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] += src[i];
}

cudaStream_t stream_of(Communicator& c) {
  void* s = c.device_stream();
  AISCALE_CUDA_REQUIRE(s != nullptr, "the GPU all-reduce algorithms need a communicator with a device stream");
  return static_cast<cudaStream_t>(s);
}

// dst += src on `stream` (n values, both device memory).
void add_into(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1024);
  add_into_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(dst, src, n);
  AISCALE_CUDA_LAUNCH_CHECK();
}

// `to`'s stream waits (on the GPU) for the work queued on `from`'s stream so far.
void join(Communicator& to, Communicator& from, void* event) {
  auto e = static_cast<cudaEvent_t>(event);
  AISCALE_CUDA_CHECK(cudaEventRecord(e, stream_of(from)));
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(to), e, 0));
}

constexpr int64_t kFloat = sizeof(float);

// Ring reduce-scatter over every rank of `c`: afterwards this rank (i) holds segment i+1
// summed over the ranks. Every rank runs the same number of send/receive pairs per step
// (RingSegments::chunks_per_step), each pair one NCCL group, so that the ranks' groups
// match one for one.
void reduce_scatter(Communicator& c, float* data, const RingSegments& seg, DeviceAllreduceWork& work) {
  const int p = seg.p, i = c.rank();
  const int right = seg.mod(i + 1), left = seg.mod(i - 1);
  const int64_t chunk = work.chunk_floats();
  const int64_t chunks = seg.chunks_per_step(chunk);
  cudaStream_t stream = stream_of(c);
  for (int k = 0; k < p - 1; ++k) {
    const int s_out = seg.scatter_send(i, k), s_in = seg.scatter_recv(i, k);
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t out_n = seg.chunk_size(s_out, ch, chunk), in_n = seg.chunk_size(s_in, ch, chunk);
      if (out_n == 0 && in_n == 0) continue;  // the same on both sides of each link
      c.group_begin();
      c.send_after(data + seg.chunk_begin(s_out, ch, chunk), out_n * kFloat, right);
      c.recv_after(work.scratch(), in_n * kFloat, left);
      c.group_end();
      add_into(data + seg.chunk_begin(s_in, ch, chunk), work.scratch(), in_n, stream);
    }
  }
}

// Ring all-gather over every rank of `c`, from rank i holding segment i+1: whole segments
// straight into place, one send/receive pair per step.
void all_gather(Communicator& c, float* data, const RingSegments& seg) {
  const int p = seg.p, i = c.rank();
  const int right = seg.mod(i + 1), left = seg.mod(i - 1);
  for (int k = 0; k < p - 1; ++k) {
    const int s_out = seg.gather_send(i, k), s_in = seg.gather_recv(i, k);
    if (seg.size(s_out) == 0 && seg.size(s_in) == 0) continue;
    c.group_begin();
    c.send_after(data + seg.begin(s_out), seg.size(s_out) * kFloat, right);
    c.recv_after(data + seg.begin(s_in), seg.size(s_in) * kFloat, left);
    c.group_end();
  }
}

// Between the node's ranks and their leader (node rank 0), each rank's segment of the ring
// (the one it owns in the all-gather): sent to the leader after the node's reduce-scatter
// (to_leader), which then holds the node's whole sum; or sent back by it.
void leader_exchange(Communicator& node, float* data, const RingSegments& seg, bool to_leader) {
  auto move = [&](int m, int peer, bool receive) {
    const int s = seg.owned(m);
    if (receive) node.recv_after(data + seg.begin(s), seg.size(s) * kFloat, peer);
    else node.send_after(data + seg.begin(s), seg.size(s) * kFloat, peer);
  };
  const int j = node.rank();
  node.group_begin();
  if (j == 0)
    for (int m = 1; m < seg.p; ++m) move(m, m, to_leader);
  else
    move(j, 0, !to_leader);
  node.group_end();
}

}  // namespace

DeviceAllreduceWork::DeviceAllreduceWork(int64_t chunk_floats) : chunk_floats_(chunk_floats) {
  AISCALE_CUDA_REQUIRE(chunk_floats > 0, "the GPU ring's chunk must hold at least one value");
  AISCALE_CUDA_CHECK(cudaMalloc(&scratch_, static_cast<size_t>(chunk_floats) * sizeof(float)));
  for (void*& e : events_) {
    cudaEvent_t ev = nullptr;
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    e = ev;
  }
}

DeviceAllreduceWork::~DeviceAllreduceWork() {
  for (void* e : events_)
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (scratch_) cudaFree(scratch_);
}

void device_ring_allreduce_sum(Communicator& ring, float* data, int64_t n, void* event,
                               DeviceAllreduceWork& work) {
  if (n <= 0) return;
  if (event) AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(ring), static_cast<cudaEvent_t>(event), 0));
  if (ring.world() <= 1) return;
  const RingSegments seg{n, ring.world()};
  reduce_scatter(ring, data, seg, work);
  all_gather(ring, data, seg);
}

void device_hierarchical_allreduce_sum(Communicator& world, Communicator& node,
                                       Communicator* leaders, float* data, int64_t n,
                                       void* event, DeviceAllreduceWork& work) {
  if (n <= 0) return;
  cudaStream_t main = stream_of(world);
  if (event) AISCALE_CUDA_CHECK(cudaStreamWaitEvent(main, static_cast<cudaEvent_t>(event), 0));
  if (world.world() <= 1) return;
  const RingSegments seg{n, node.world()};
  // (1) The node's sum onto its leader, on the node's stream.
  join(node, world, work.event(0));
  if (seg.p > 1) {
    reduce_scatter(node, data, seg, work);
    leader_exchange(node, data, seg, true);
  }
  // (2) NCCL's all-reduce of the node sums among the leaders, on the leaders' stream.
  if (leaders && leaders->world() > 1) {
    AISCALE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(work.event(1)), stream_of(node)));
    leaders->allreduce_sum_after(data, n, DType::f32, work.event(1));
    join(node, *leaders, work.event(2));
  }
  // (3) The result from the leader to the node's ranks, then back to world's stream.
  if (seg.p > 1) {
    leader_exchange(node, data, seg, false);
    all_gather(node, data, seg);
  }
  join(world, node, work.event(3));
}

void device_synchronize_for_allreduce() {
  AISCALE_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace aiscale::parallel
