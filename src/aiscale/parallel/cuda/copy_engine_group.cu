// Copy-engine gradient exchange over CUDA IPC: see copy_engine_group.h for the protocol.
// This file sets up the IPC mappings and orders the copies, flags and waits; the sum
// kernels are in copy_engine_sums.cu.
#include <cuda.h>  // driver types for the stream memory operations (entry points, no link)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/parallel/cuda/copy_engine_group.h"
#include "aiscale/parallel/cuda/copy_engine_sums.cuh"
#include "aiscale/parallel/cuda/staging_ring.h"

namespace aiscale::parallel {
namespace {

using copy_engine::SquareSums;
using copy_engine::kMaxSumBlocks;
using copy_engine::launch_sum;

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// flags: 0 chunk staged, 1 sum delivered, 2 all-gather, 3 ready to receive, 4 pushed part
constexpr int kPhases = 5;
constexpr size_t kFlagBytes = 4096;   // flags region at the start of the group's buffer
constexpr int64_t kChunkAlign = 64;   // elements; chunk boundaries (256 B in fp32)
constexpr size_t kSlotAlign = 256;    // bytes

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw Error("copy-engine gradient exchange: " + what + ": " + cudaGetErrorString(e));
}

struct PeerInfo {
  char host[128];
  cudaIpcMemHandle_t arena;
  cudaIpcMemHandle_t group;  // flags + staging
  uint64_t arena_bytes;
  uint64_t staging_bytes;
  char pci[32];
  int32_t ready;  // 0: this rank's own set-up failed
};

class CopyEngineGroup final : public Communicator {
 public:
  // Collective: a rank whose own set-up fails still takes part in the exchange of handles
  // and the final agreement, so that every rank fails at once, naming the failed ranks.
  CopyEngineGroup(Communicator& base, const CopyEngineGroupOptions& o)
      : base_(base), rank_(base.rank()), world_(base.world()), opt_(o) {
    std::string error;
    try {
      set_up_locally();
    } catch (const std::exception& e) {
      error = e.what();
    }
    connect(error);
  }

  ~CopyEngineGroup() override {
    // Every peer write aimed at this rank belongs to a call whose end the stream waits
    // for; let it get there before unmapping.
    if (issued()) {
      try {
        wait_done("shut-down");
      } catch (const std::exception&) {
      }
    }
    release();
  }

 private:
  void set_up_locally() {
    if (!opt_.arena || opt_.arena_bytes == 0) throw Error("copy-engine gradient exchange: no buffer given");
    check(cudaGetDevice(&device_), "cudaGetDevice");
    staging_bytes_ = round_up(std::max<size_t>(opt_.staging_bytes, kSlotAlign), kSlotAlign);
    check(cudaMalloc(&group_, kFlagBytes + staging_bytes_), "allocation of the staging ring (" +
                                                                std::to_string(staging_bytes_ >> 20) + " MiB)");
    check(cudaMemset(group_, 0, kFlagBytes), "clearing the flags");
    ring_ = std::make_unique<StagingRing>(staging_bytes_);
    // The fused sums of squares: one partial per sum block, then the blocks' counter.
    const size_t square_bytes = kMaxSumBlocks * sizeof(double) + sizeof(unsigned);
    check(cudaMalloc(&squares_.partials, square_bytes), "allocation of the sum-of-squares scratch");
    check(cudaMemset(squares_.partials, 0, square_bytes), "clearing the sum-of-squares scratch");
    squares_.counter = reinterpret_cast<unsigned*>(squares_.partials + kMaxSumBlocks);
    // The streams get the device's highest priority: a sum kernel then takes SMs as the
    // model's kernels free them instead of waiting behind the whole of the kernel running
    // beside it (the last bucket's sum beside the embedding backward, docs/design/gradient-exchange.md).
    int lowest = 0, highest = 0;
    check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "stream priorities");
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, highest), "stream creation");
    check(cudaStreamCreateWithPriority(&push_stream_, cudaStreamNonBlocking, highest),
          "stream creation");
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "event creation");
    check(cudaEventCreateWithFlags(&push_done_, cudaEventDisableTiming), "event creation");
    cudaDriverEntryPointQueryResult q{};
    void* fn = nullptr;
    check(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q),
          "looking up cuStreamWaitValue32");
    if (!fn || q != cudaDriverEntryPointSuccess)
      throw Error("copy-engine gradient exchange: the driver has no cuStreamWaitValue32");
    wait_value_ = reinterpret_cast<WaitValueFn>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &q) ==
            cudaSuccess && fn && q == cudaDriverEntryPointSuccess)
      write_value_ = reinterpret_cast<WriteValueFn>(fn);
    // Flags are raised by the GPU's front end (cuStreamWriteValue32, which fences the copies
    // before it), needing no SM, unless the driver refuses a write into peer memory (then a
    // one-thread kernel, which must wait for a free SM slot).
  }

  void release() {
    for (size_t j = 0; j < peer_arena_.size(); ++j) {
      if (peer_arena_[j]) cudaIpcCloseMemHandle(peer_arena_[j]);
      if (peer_group_[j]) cudaIpcCloseMemHandle(peer_group_[j]);
      peer_arena_[j] = peer_group_[j] = nullptr;
    }
    if (done_) cudaEventDestroy(done_);
    if (push_done_) cudaEventDestroy(push_done_);
    if (stream_) cudaStreamDestroy(stream_);
    if (push_stream_) cudaStreamDestroy(push_stream_);
    if (group_) cudaFree(group_);
    if (squares_.partials) cudaFree(squares_.partials);
    done_ = push_done_ = nullptr;
    stream_ = push_stream_ = nullptr;
    group_ = nullptr;
    squares_ = SquareSums{};
  }

 public:
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return base_.backend() + "+copy-engine"; }
  bool on_device() const override { return true; }
  void allreduce_sum(float* d, int64_t n) override { base_.allreduce_sum(d, n); }
  void allreduce_sum(double* d, int64_t n) override { base_.allreduce_sum(d, n); }
  void broadcast(float* d, int64_t n, int root) override { base_.broadcast(d, n, root); }
  void broadcast_bytes(void* d, int64_t bytes, int root) override { base_.broadcast_bytes(d, bytes, root); }
  void barrier() override { base_.barrier(); }
  void abort(int code) override { base_.abort(code); }
  void* device_stream() override { return stream_; }

  void wait() override {
    if (issued()) wait_done("gradient exchange");
    base_.wait();
  }

  void allreduce_sum_after(void* data, int64_t n, DType t, void* event) override {
    allreduce(data, n, t, event, SquareSums{});
  }

  bool fuses_sum_squares() const override { return true; }
  void allreduce_sum_squares_after(void* data, int64_t n, DType t, void* event,
                                   double* sum_squares) override {
    if (t != DType::f32) throw Error("copy-engine all-reduce: sums of squares only of f32 values");
    SquareSums q = squares_;
    q.out = sum_squares;
    allreduce(data, n, t, event, q);
  }

  void allgather_after(void* data, int64_t bytes, void* event) override {
    if (bytes <= 0) return;
    char* base = static_cast<char*>(data);
    check_inside(base, size_t(bytes) * size_t(world_), "all-gather");
    after(event);
    const uint32_t call = ++issued_ag_;
    char* mine = base + int64_t(rank_) * bytes;
    // The copies land in the peers' own buffers, at this rank's pace. Where the caller
    // orders the call after an event (the buffer's earlier users on its stream), every
    // rank first reports that its stream has passed that event and waits for the peers'
    // reports, so nothing is written into memory a peer still uses (e.g. a peer still
    // clearing its gradients at start-up when this rank gathers the ZeRO-1 shards). Calls
    // without an event follow such a call on the same stream.
    if (event) {
      raise_all(3, call);
      wait_all(3, call);
    }
    send_to_peers(mine, size_t(bytes), 2, call, stream_, "all-gather copy");
    wait_all(2, call);
  }

  // The copies go on a second stream, so they neither wait for the queued collectives
  // nor hold them up; the consumer waits for the peers' flags (phase 4).
  bool allgather_push(void* data, int64_t bytes, void* event, void* consumer) override {
    if (bytes <= 0) return true;
    char* base = static_cast<char*>(data);
    check_inside(base, size_t(bytes) * size_t(world_), "all-gather");
    after(event, push_stream_);
    const uint32_t call = ++issued_push_;
    send_to_peers(base + int64_t(rank_) * bytes, size_t(bytes), 4, call, push_stream_,
                  "all-gather copy");
    check(cudaEventRecord(push_done_, push_stream_), "event record");
    wait_all(4, call, static_cast<cudaStream_t>(consumer));
    return true;
  }

  // ZeRO-1: the values are W parts of `count`; rank r's part [r count, (r + 1) count)
  // ends up holding the sum (as NCCL's in-place reduce-scatter). Steps (1) and (2) of the
  // all-reduce with the chunks on the parts; the second flag then only says "your staged
  // part is consumed", and no sum travels back.
  void reduce_scatter_sum_after(void* data, int64_t count, DType t, void* event) override {
    if (count <= 0) return;
    char* base = static_cast<char*>(data);
    begin_sum(base, count * world_, t, event, "reduce-scatter");
    const uint32_t call = ++issued_ar_;
    stage_and_sum(base, t, call, [&](int j) { return int64_t(j) * count; }, "reduce-scatter",
                  SquareSums{});
    raise_all(1, call);
  }

  void record(void* event) override {
    check(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_), "event record");
  }

 private:
  // Steps (1)-(3) of the all-reduce (copy_engine_group.h); the squares of this rank's sums
  // into *q.out where set.
  void allreduce(void* data, int64_t n, DType t, void* event, const SquareSums& q) {
    if (n <= 0) return;
    char* base = static_cast<char*>(data);
    const size_t es = begin_sum(base, n, t, event, "all-reduce");
    const uint32_t call = ++issued_ar_;
    // Chunk j: [begin(j), begin(j + 1)), boundaries on kChunkAlign elements.
    auto begin = [&](int j) {
      return j == world_ ? n : std::min(n, (n * j / world_) / kChunkAlign * kChunkAlign);
    };
    stage_and_sum(base, t, call, begin, "all-reduce", q);
    // (3) the sum into every peer's values.
    const int64_t b = begin(rank_), e = begin(rank_ + 1);
    send_to_peers(base + b * int64_t(es), size_t(e - b) * es, 1, call, stream_, "copy of the sum");
    // Work queued on this stream later sees the whole sum (as after an NCCL call).
    wait_all(1, call);
  }

  // Checks shared by the summing collectives (n values of t at base, ordered after event);
  // returns the element size.
  size_t begin_sum(char* base, int64_t n, DType t, void* event, const char* what) {
    if (t != DType::f32 && t != DType::bf16)
      throw Error(std::string("copy-engine ") + what + ": only f32 and bf16 values are summed");
    const size_t es = dtype_size(t);
    check_inside(base, size_t(n) * es, what);
    after(event);
    return es;
  }

  // Steps (1) and (2) of a sum over the ranks. Chunk j of `base` (elements [begin(j),
  // begin(j + 1))) goes into rank j's staging ring, slot `rank_`, flagged (phase 0); once
  // every peer's copy of this rank's chunk has arrived, they are summed into it in rank
  // order. A ring region is reused only after its peer has reported (phase 1) the call that
  // last used it.
  void stage_and_sum(char* base, DType t, uint32_t call, const std::function<int64_t(int)>& begin,
                     const char* what, const SquareSums& q) {
    const size_t es = dtype_size(t);
    int64_t max_chunk = 0;
    for (int j = 0; j < world_; ++j) max_chunk = std::max(max_chunk, begin(j + 1) - begin(j));
    const size_t slot = round_up(size_t(max_chunk) * es, kSlotAlign);
    const size_t need = slot * size_t(world_);
    if (need > staging_bytes_)
      throw Error(std::string("copy-engine ") + what + " of " +
                  std::to_string(size_t(begin(world_) - begin(0)) * es) + " bytes needs " +
                  std::to_string(need) + " bytes of staging; the ring has " +
                  std::to_string(staging_bytes_));
    const StagingRing::Take taken = ring_->take(need, call);
    for (int k = 1; k < world_; ++k) {
      const int j = (rank_ + k) % world_;
      if (taken.reuse_wait > 0) wait_flag(1, j, taken.reuse_wait);  // j consumed that region
      const int64_t b = begin(j), e = begin(j + 1);
      if (e > b)
        check(cudaMemcpyAsync(peer_staging(j) + taken.offset + size_t(rank_) * slot,
                              base + b * int64_t(es), size_t(e - b) * es, cudaMemcpyDeviceToDevice,
                              stream_),
              std::string(what) + " copy to rank " + std::to_string(j));
      raise(j, 0, call);
    }
    wait_all(0, call);
    const int64_t b = begin(rank_), e = begin(rank_ + 1);
    if (e > b) sum_staged(base, b, e - b, t, taken.offset, slot, q);
  }

  // Flag (phase, rank_) raised on every peer; `stream` (default: the group's) waiting for
  // every peer's.
  void raise_all(int phase, uint32_t value) {
    for (int k = 1; k < world_; ++k) raise((rank_ + k) % world_, phase, value);
  }
  void wait_all(int phase, uint32_t value, cudaStream_t stream = nullptr) {
    for (int k = 1; k < world_; ++k) wait_flag(phase, (rank_ + world_ - k) % world_, value, stream);
  }
  // This rank's `bytes` at `mine` into the same place on every peer, each copy followed
  // by flag (phase, rank_) = value there, on `stream`.
  void send_to_peers(const char* mine, size_t bytes, int phase, uint32_t value,
                     cudaStream_t stream, const char* what) {
    for (int k = 1; k < world_; ++k) {
      const int j = (rank_ + k) % world_;
      if (bytes > 0)
        check(cudaMemcpyAsync(peer_address(j, mine), mine, bytes, cudaMemcpyDeviceToDevice, stream),
              std::string(what) + " to rank " + std::to_string(j));
      raise(j, phase, value, stream);
    }
  }

  // values [b, b + m) of `base` += the peers' staged copies of them (ring offset `off`,
  // one `slot` per rank), in rank order; the squares of the sums into *q.out if set.
  void sum_staged(char* base, int64_t b, int64_t m, DType t, size_t off, size_t slot,
                  const SquareSums& q) {
    const size_t es = dtype_size(t);
    const int64_t slot_elems = int64_t(slot / es);
    if (t == DType::f32)
      launch_sum(reinterpret_cast<float*>(base) + b, reinterpret_cast<const float*>(my_staging() + off),
                 slot_elems, world_, rank_, m, q, stream_);
    else
      launch_sum(reinterpret_cast<cuda::bf16*>(base) + b,
                 reinterpret_cast<const cuda::bf16*>(my_staging() + off), slot_elems, world_, rank_,
                 m, q, stream_);
    check(cudaGetLastError(), "sum kernel launch");
  }

  // Refuses work once a wait has timed out; then `stream` (default: the group's) waits for
  // `event`, if any.
  void after(void* event, cudaStream_t stream = nullptr) {
    if (broken_)
      throw Error("rank " + std::to_string(rank_) + ": the copy-engine gradient exchange failed "
                  "earlier (a peer rank did not answer)");
    if (event)
      check(cudaStreamWaitEvent(stream ? stream : stream_, static_cast<cudaEvent_t>(event), 0),
            "stream wait");
  }

  bool issued() const { return issued_ar_ > 0 || issued_ag_ > 0 || issued_push_ > 0; }

  void check_inside(const char* p, size_t bytes, const char* what) const {
    const char* a = static_cast<const char*>(opt_.arena);
    if (p < a || p + bytes > a + opt_.arena_bytes)
      throw Error(std::string("copy-engine ") + what + ": the buffer lies outside the registered arena");
  }

  char* my_staging() const { return static_cast<char*>(group_) + kFlagBytes; }
  uint32_t* my_flag(int phase, int from) const {
    return reinterpret_cast<uint32_t*>(group_) + phase * world_ + from;
  }
  char* peer_staging(int j) const { return static_cast<char*>(peer_group_[j]) + kFlagBytes; }
  char* peer_address(int j, const char* mine) const {
    return static_cast<char*>(peer_arena_[j]) + (mine - static_cast<const char*>(opt_.arena));
  }

  // Sets flag (phase, rank_) on rank j to `value` after the work queued before it on
  // `stream` (default: the group's).
  void raise(int j, int phase, uint32_t value, cudaStream_t stream = nullptr) {
    if (!stream) stream = stream_;
    uint32_t* f = reinterpret_cast<uint32_t*>(peer_group_[j]) + phase * world_ + rank_;
    if (write_value_) {
      const CUresult r = write_value_(reinterpret_cast<CUstream>(stream),
                                      reinterpret_cast<CUdeviceptr>(f), value, 0);
      if (r == CUDA_SUCCESS) return;
      write_value_ = nullptr;  // not into peer memory on this system: the kernel from now on
    }
    copy_engine::launch_raise_flag(f, value, stream);
    check(cudaGetLastError(), "flag kernel launch");
  }

  // `stream` (default: the group's) waits (no SM) until this rank's flag (phase, from)
  // reaches `value`.
  void wait_flag(int phase, int from, uint32_t value, cudaStream_t stream = nullptr) {
    const CUresult r = wait_value_(reinterpret_cast<CUstream>(stream ? stream : stream_),
                                   reinterpret_cast<CUdeviceptr>(my_flag(phase, from)), value,
                                   CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS)
      throw Error("copy-engine gradient exchange: cuStreamWaitValue32 failed (CUresult " +
                  std::to_string(int(r)) + ")");
  }

  // Host wait, bounded by the timeout, for everything queued on the stream. On a timeout
  // the flags are raised to their maximum from the host, so the stream (and anything that
  // synchronises with the device, such as cudaFree) does not stay blocked on a dead peer,
  // and the group refuses further work.
  void wait_done(const char* what) {
    if (broken_) return;
    if (issued_push_ > 0) check(cudaStreamWaitEvent(stream_, push_done_, 0), "stream wait");
    check(cudaEventRecord(done_, stream_), "event record");
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check(q, what);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > opt_.timeout_s) {
        broken_ = true;
        cudaMemset(group_, 0xff, kFlagBytes);
        throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                    ": the copy-engine " + what + " did not complete within " +
                    std::to_string(int(opt_.timeout_s)) +
                    " s: a peer rank has probably died or hangs (raise parallel.timeout_s if "
                    "steps are that slow)");
      }
      if (spins < 2000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 500));
    }
  }

  void connect(std::string error) {
    PeerInfo me{};
    if (::gethostname(me.host, sizeof me.host - 1) != 0) std::strcpy(me.host, "unknown");
    if (error.empty()) {
      try {
        check(cudaIpcGetMemHandle(&me.arena, opt_.arena), "IPC handle of the model's buffer");
        check(cudaIpcGetMemHandle(&me.group, group_), "IPC handle of the staging ring");
        check(cudaDeviceGetPCIBusId(me.pci, sizeof me.pci, device_), "PCI bus id");
        me.arena_bytes = opt_.arena_bytes;
        me.staging_bytes = staging_bytes_;
        me.ready = 1;
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    std::vector<PeerInfo> all(static_cast<size_t>(world_));
    for (int root = 0; root < world_; ++root) {
      PeerInfo x = root == rank_ ? me : PeerInfo{};
      base_.broadcast_bytes(&x, sizeof x, root);
      all[size_t(root)] = x;
    }
    bool everyone_ready = true;
    for (const PeerInfo& p : all) everyone_ready = everyone_ready && p.ready == 1;
    peer_arena_.assign(size_t(world_), nullptr);
    peer_group_.assign(size_t(world_), nullptr);
    if (error.empty() && everyone_ready) {
      try {
        check_layout(all, me);
        for (int j = 0; j < world_; ++j) {
          if (j == rank_) continue;
          check(cudaIpcOpenMemHandle(&peer_arena_[size_t(j)], all[size_t(j)].arena,
                                     cudaIpcMemLazyEnablePeerAccess),
                "mapping rank " + std::to_string(j) + "'s buffer (GPU " + all[size_t(j)].pci + ")");
          check(cudaIpcOpenMemHandle(&peer_group_[size_t(j)], all[size_t(j)].group,
                                     cudaIpcMemLazyEnablePeerAccess),
                "mapping rank " + std::to_string(j) + "'s staging ring");
        }
        check(cudaDeviceSynchronize(), "set-up");
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    // Agreement (and the barrier after which flags may be raised: all are clear by now).
    std::vector<double> failed(static_cast<size_t>(world_), 0.0);
    failed[size_t(rank_)] = error.empty() ? 0.0 : 1.0;
    base_.allreduce_sum(failed.data(), world_);
    std::string which;
    for (int j = 0; j < world_; ++j)
      if (failed[size_t(j)] > 0) which += (which.empty() ? "" : ", ") + std::to_string(j);
    if (which.empty()) return;
    release();
    const std::string fix = " (parallel.grad_transport = \"nccl\" works without it)";
    if (!error.empty()) throw Error(error + fix);
    throw Error("rank " + std::to_string(rank_) + ": the copy-engine gradient exchange could not "
                "be set up on rank(s) " + which + " (their errors say why)" + fix);
  }

  // Every rank on this node, with the same buffer layout, one GPU each (the same verdict
  // on every rank: it sees everyone's information).
  void check_layout(const std::vector<PeerInfo>& all, const PeerInfo& me) const {
    for (int j = 0; j < world_; ++j) {
      const PeerInfo& p = all[size_t(j)];
      if (std::strncmp(p.host, all[0].host, sizeof p.host) != 0)
        throw Error(std::string("the copy-engine gradient exchange needs every rank on one node: "
                                "rank 0 runs on ") + all[0].host + ", rank " + std::to_string(j) +
                    " on " + p.host + " (use NCCL across nodes)");
      if (p.arena_bytes != me.arena_bytes || p.staging_bytes != me.staging_bytes)
        throw Error("copy-engine gradient exchange: rank " + std::to_string(j) +
                    " has a different buffer layout (different model or batch?)");
      for (int k = 0; k < j; ++k)
        if (std::strncmp(p.pci, all[size_t(k)].pci, sizeof p.pci) == 0)
          throw Error("copy-engine gradient exchange: ranks " + std::to_string(k) + " and " +
                      std::to_string(j) + " share the GPU " + p.pci + " (one GPU per rank)");
    }
  }

  Communicator& base_;
  int rank_, world_;
  CopyEngineGroupOptions opt_;
  int device_ = 0;
  void* group_ = nullptr;
  SquareSums squares_;  // the fused sums of squares' block partials and counter (out unset)
  size_t staging_bytes_ = 0;
  cudaStream_t stream_ = nullptr, push_stream_ = nullptr;  // collectives; allgather_push's copies
  cudaEvent_t done_ = nullptr, push_done_ = nullptr;
  WaitValueFn wait_value_ = nullptr;
  WriteValueFn write_value_ = nullptr;
  std::vector<void*> peer_arena_, peer_group_;
  uint32_t issued_ar_ = 0, issued_ag_ = 0, issued_push_ = 0;
  bool broken_ = false;  // a wait timed out: the peers are gone
  std::unique_ptr<StagingRing> ring_;
};

}  // namespace

std::unique_ptr<Communicator> make_copy_engine_group(Communicator& base,
                                                     const CopyEngineGroupOptions& options) {
  if (base.world() < 2) throw Error("the copy-engine gradient exchange needs 2 or more ranks");
  if (size_t(base.world()) * size_t(kPhases) * 4 > kFlagBytes)
    throw Error("the copy-engine gradient exchange supports at most " +
                std::to_string(kFlagBytes / 4 / kPhases) + " ranks on one node");
  return std::make_unique<CopyEngineGroup>(base, options);
}

}  // namespace aiscale::parallel
