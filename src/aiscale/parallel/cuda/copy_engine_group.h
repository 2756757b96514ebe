// Gradient exchange between the GPUs of one node through CUDA IPC and the copy engines
// (DMA), for data parallelism: an SM-free alternative to NCCL's kernels for the buckets
// that run beside the backward pass.
//
// Why: on NVLink H200s NCCL's all-reduce kernels, run beside backward, slowed it by about
// their own duration (docs/design/gradient-exchange.md): their CTAs hold SMs while they wait for the
// peer's CTAs. Here the bytes move by cudaMemcpyAsync between IPC-mapped buffers (copy
// engines, no SMs), the flags and the waits for the peers are stream memory operations
// (cuStreamWriteValue32 into the peer's memory, cuStreamWaitValue32 on one's own: the
// GPU's front end does them, no SMs), and only the sum itself is a
// kernel: a few microseconds per bucket at HBM speed.
//
// All-reduce of n values over W ranks: the values are cut into W chunks; rank r owns
// chunk r. (1) Every rank copies chunk j of its values into rank j's staging slot for it
// and raises a flag there. (2) Rank r waits for the W - 1 flags, sums its chunk with the
// W - 1 staged ones in rank order (so every rank ends up with the same bits), and
// (3) copies the summed chunk into the same place on every other rank, raising a second
// flag. A call is complete on rank r when the second flags of all peers have arrived; the
// stream waits for that at the end of each call, so later work on it sees the result.
// All-gather: each rank copies its part to every peer and raises a third flag; when the
// call is ordered after an event, the ranks first exchange a fourth flag ("my stream has
// passed the event: my buffer may be written"), since the copies land in the peers'
// buffers at the sender's pace. allgather_push skips that exchange (the caller vouches
// for the receivers' buffers): its copies go on a second stream, beside the queued sums,
// each followed by a fifth flag, and the consumer's stream waits for the peers' flags.
//
// Staging is a ring on each rank; a rank reuses a region in a peer's ring only after that
// peer has reported (second flag) the call that last used it. Every rank must make the
// same calls in the same order (true of a data-parallel model), and all ranks must be on
// one node. Host-side collectives (losses, norms, broadcasts) go to the wrapped
// communicator.
#pragma once
#include <cstddef>
#include <memory>

#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {

struct CopyEngineGroupOptions {
  // The device buffer the collectives work on (one cudaMalloc allocation, identical
  // layout on every rank): the model's arena. Pointers given to the collectives must lie
  // inside it.
  void* arena = nullptr;
  size_t arena_bytes = 0;
  // Ring of staging memory on each rank; at least the bytes of the largest all-reduce.
  size_t staging_bytes = 0;
  double timeout_s = 300;  // a call not complete after this long fails the rank
};

// Collective over `base`'s ranks (all must call it): exchanges IPC handles through
// `base` and maps the peers' buffers. Throws Error naming the reason when the ranks are
// not on one node or the GPUs cannot map each other's memory. `base` must outlive the
// returned communicator.
std::unique_ptr<Communicator> make_copy_engine_group(Communicator& base,
                                                     const CopyEngineGroupOptions& options);

}  // namespace aiscale::parallel
