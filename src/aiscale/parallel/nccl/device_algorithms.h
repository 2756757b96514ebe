// The hand-written all-reduce algorithms on GPUs (parallel.allreduce = ring | hierarchical
// with NCCL ranks), built from stream-ordered point-to-point messages
// (Communicator::send_after / recv_after) and a small CUDA kernel that adds a received
// chunk into place. Everything is queued on the communicators' streams; nothing blocks
// the host.
//
// Ring: the buffer is cut into one segment per rank (RingSegments: any n, any rank count);
// p-1 reduce-scatter steps each send one segment to the right and receive the next from
// the left, chunk by chunk into a bounded scratch buffer, each chunk added into place by
// the kernel; then p-1 all-gather steps receive the summed segments straight into place.
// Unlike NCCL's own ring, which sums inside its transfer kernel as the data streams in,
// every chunk here costs one NCCL launch and one add kernel in sequence on one stream.
//
// Hierarchical: the ranks of a node (forced by ranks_per_node, or sharing a host name)
// form a node communicator and the nodes' lowest ranks a leaders communicator
// (Communicator::split). (1) Reduce to the leader: the node's ring reduce-scatter, then
// every rank sends its summed segment to the leader. (2) NCCL's own all-reduce among the
// leaders. (3) Broadcast: the leader sends each rank its segment back, and the node's ring
// all-gather completes the buffer everywhere.
#pragma once
#include <cstdint>
#include <memory>

#include "aiscale/core/non_copyable.h"
#include "aiscale/parallel/algorithms/allreduce_choice.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {

// GPU chunks are 4 MiB of fp32 (one NCCL send/receive pair and one add kernel each).
inline constexpr int64_t kDeviceChunkFloats = int64_t{1} << 20;

// --- The algorithms (device_algorithms.cu; CUDA builds only) ---

// The GPU memory and CUDA events one all-reduce communicator needs: the scratch buffer of
// the reduce-scatter steps (chunk_floats values) and the events that order the work of
// several communicators' streams. On the current GPU.
class DeviceAllreduceWork : NonCopyable {
 public:
  explicit DeviceAllreduceWork(int64_t chunk_floats);
  ~DeviceAllreduceWork();
  int64_t chunk_floats() const { return chunk_floats_; }
  float* scratch() const { return scratch_; }
  void* event(int i) const { return events_[i]; }
  static constexpr int kEvents = 4;

 private:
  int64_t chunk_floats_;
  float* scratch_ = nullptr;
  void* events_[kEvents] = {};
};

// In-place fp32 sum over every rank of `ring` (device memory), after `event` (a cudaEvent_t
// recorded by the caller; null: after the work queued on ring's stream). Queued on ring's
// stream; ring.wait() completes it.
void device_ring_allreduce_sum(Communicator& ring, float* data, int64_t n, void* event,
                               DeviceAllreduceWork& work);

// The hierarchical sum over the ranks of `world`: `node` holds this rank's node (its rank 0
// the leader), `leaders` the nodes' leaders (null on the other ranks). Starts after `event`
// and the work queued on world's stream, and ends with world's stream waiting for it (so
// world.record() marks its completion); world.wait() alone does not complete it: wait for
// node and leaders too.
void device_hierarchical_allreduce_sum(Communicator& world, Communicator& node,
                                       Communicator* leaders, float* data, int64_t n,
                                       void* event, DeviceAllreduceWork& work);

// Waits for all the current GPU's queued work (before a blocking all-reduce, whose data may
// come from any stream).
void device_synchronize_for_allreduce();

// --- The communicator that uses them (device_allreduce.cpp) ---

// Wraps a device communicator (NCCL) so that its fp32 device sums (allreduce_sum and
// allreduce_sum_async on device pointers, allreduce_sum_after with DType::f32) run
// `setting`'s algorithm; every other call, host values and other types included, goes to
// the wrapped communicator. Collective (the hierarchical algorithm gathers the ranks'
// nodes, from setting.ranks_per_node or the host names, and splits `inner` into its node
// and leaders communicators). Library: returns inner unchanged.
std::unique_ptr<Communicator> with_device_allreduce(std::unique_ptr<Communicator> inner,
                                                    const algorithms::AllreduceSetting& setting);

}  // namespace aiscale::parallel
