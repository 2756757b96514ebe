// NCCL communicator: one process per GPU, collectives on device memory.
//
// Set-up: the NCCL unique id (rank 0's bootstrap address) reaches the other ranks
// through MPI (mpirun, srun --mpi=pmix), a rendezvous file (parallel.rendezvous =
// "file:/shared/path") or a TCP store (torchrun-style MASTER_ADDR and MASTER_PORT, or
// MASTER_PORT+1 beside torchrun's own store: aiscale_store_port in launch_env.h; or
// parallel.rendezvous = "tcp://host:port"); each rank takes the GPU of its node-local
// rank. split() makes sub-group communicators with ncclCommSplit.
//
// Failure: no NCCL call may hang the host when a peer dies. Issued collectives are
// waited for by polling (ncclCommGetAsyncError, cudaStreamQuery) against a deadline of
// parallel.timeout_s; when a peer dies (its process ends, its GPU fails) the collective
// either reports an error or stalls, and either way this rank aborts the communicator
// (ncclCommAbort, which also ends the NCCL kernels) and fails with a message naming the
// call. The calls themselves: the communicator is blocking by default, so a call that
// waits inside NCCL for a peer (the set-up, a first connection) is bounded by a monitor
// thread (call_monitor.h) that names the call and ends the process; with
// AISCALE_NCCL_BLOCKING=0 the communicator is non-blocking instead and every call is
// polled like the collectives, at ~50 us per collective (NCCL completes each
// non-blocking group on a thread of its own): docs/guide/communication.md.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>

#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/launch_env.h"
#include "aiscale/parallel/nccl/call_monitor.h"
#include "aiscale/parallel/rendezvous.h"
#include "aiscale/parallel/store.h"

#ifdef AISCALE_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace aiscale::parallel {

#ifdef AISCALE_HAVE_NCCL
namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {} failed: {}", what, cudaGetErrorString(e));
}

class NcclCommunicator final : public Communicator {
 public:
  // Host pointers are staged through this device buffer in chunks.
  static constexpr size_t kScratchBytes = size_t{4} << 20;

  // Creates the stream and the staging buffer; init_rank or adopt then gives it its
  // NCCL communicator.
  NcclCommunicator(std::unique_ptr<Communicator> bootstrap, double timeout_s)
      : bootstrap_(std::move(bootstrap)), timeout_s_(timeout_s) {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream creation");
    cuda_check(cudaMalloc(&scratch_, kScratchBytes), "allocation of the NCCL staging buffer");
  }

  // The job's communicator: every rank calls this with rank 0's unique id.
  void init_rank(int rank, int world, const ncclUniqueId& id) {
    rank_ = rank;
    world_ = world;
    ncclConfig_t config = make_config("aiscale");
    watch_calls();
    ncclResult_t r = ncclSuccess;
    {
      NcclCallMonitor::Scope call(monitor_.get(), "initialisation (connecting to the other ranks)");
      r = ncclCommInitRankConfig(&comm_, world, id, rank, &config);
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;
      die(fmt::format("rank {}: NCCL initialisation failed: {}", rank_, ncclGetErrorString(r)));
    }
    settle("initialisation (connecting to the other ranks)");
  }

  // Sub-groups by ncclCommSplit: collective over this communicator's ranks; the new
  // communicator shares nothing with this one but the GPU (own stream, own buffer).
  std::unique_ptr<Communicator> split(int color, int key) override {
    if (!comm_) die(fmt::format("rank {}: the NCCL communicator was aborted earlier", rank_));
    finish_pending();
    // The group's few host values keep going through MPI where this communicator's do.
    std::unique_ptr<Communicator> sub_bootstrap;
    if (bootstrap_ && bootstrap_->world() == world_) sub_bootstrap = bootstrap_->split(color, key);
    std::unique_ptr<NcclCommunicator> sub;
    if (color >= 0) sub = std::make_unique<NcclCommunicator>(std::move(sub_bootstrap), timeout_s_);
    ncclConfig_t config = make_config("aiscale-group");
    // A non-blocking split writes the new handle only when the split has completed, after
    // ncclCommSplit returned: into memory that outlives this call (the new communicator's
    // own member, or this one's for a rank in no group).
    ncclComm_t* slot = sub ? &sub->comm_ : &split_slot_;
    *slot = nullptr;
    if (sub) sub->watch_calls();
    ncclResult_t r = ncclSuccess;
    {
      NcclCallMonitor::Scope call(monitor_.get(), "split into sub-groups");
      r = ncclCommSplit(comm_, color >= 0 ? color : NCCL_SPLIT_NOCOLOR, key, slot, &config);
    }
    if (r != ncclSuccess && r != ncclInProgress) fail_nccl(r, "split into sub-groups");
    if (r == ncclInProgress) settle("split into sub-groups");
    if (!sub) return nullptr;
    const auto start = Clock::now();
    for (int spins = 0; __atomic_load_n(slot, __ATOMIC_ACQUIRE) == nullptr; ++spins) {
      check_deadline(start, "split into sub-groups (waiting for the new communicator)");
      backoff(spins);
    }
    sub->adopt(__atomic_load_n(slot, __ATOMIC_ACQUIRE));
    return sub;
  }

  ~NcclCommunicator() override {
    if (comm_) {
      if (std::uncaught_exceptions() > 0) {
        abort_communicator();  // leaving on an error: the peers may be gone
      } else {
        try {
          if (pending_) wait_stream("queued collectives");
          NcclCallMonitor::Scope call(monitor_.get(), "shut-down");
          ncclResult_t r = ncclCommFinalize(comm_);
          if (r == ncclSuccess || r == ncclInProgress) settle("shut-down");
          if (comm_) ncclCommDestroy(comm_);
          comm_ = nullptr;
        } catch (const Error& e) {
          log::warn("{}", e.what());
        }
      }
    }
    if (!aborted_) {  // after an abort, kernels may have been cut short: leave the memory be
      if (scratch_) cudaFree(scratch_);
      if (stream_) cudaStreamDestroy(stream_);
    }
    bootstrap_.reset();  // MPI_Finalize after NCCL is gone
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  bool on_device() const override { return true; }

  void allreduce_sum(float* d, int64_t n) override {
    if (small_host_values(d, n)) return bootstrap_->allreduce_sum(d, n);
    reduce(d, n, ncclFloat, 4);
  }
  void allreduce_sum(double* d, int64_t n) override {
    if (small_host_values(d, n)) return bootstrap_->allreduce_sum(d, n);
    reduce(d, n, ncclDouble, 8);
  }
  void broadcast(float* d, int64_t n, int root) override { bcast(d, n, ncclFloat, 4, root); }
  void broadcast_bytes(void* d, int64_t bytes, int root) override { bcast(d, bytes, ncclInt8, 1, root); }
  void barrier() override {
    finish_pending();
    enqueue([&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_); },
            "barrier");
    wait_stream("barrier");
  }
  void abort(int code) override {
    abort_communicator();
    if (bootstrap_) bootstrap_->abort(code);
    std::_Exit(code);
  }
  void allreduce_sum_async(float* d, int64_t n) override {
    if (n <= 0) return;
    if (!cuda_is_device_pointer(d)) return allreduce_sum(d, n);
    enqueue([&] { return ncclAllReduce(d, d, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_); },
            "all-reduce");
    pending_ = true;
  }
  void wait() override { finish_pending(); }

  void* device_stream() override { return stream_; }
  void allreduce_sum_after(void* d, int64_t n, DType t, void* event) override {
    if (n <= 0) return;
    const ncclDataType_t type = nccl_type(t);
    after(event);
    enqueue([&] { return ncclAllReduce(d, d, static_cast<size_t>(n), type, ncclSum, comm_, stream_); },
            "all-reduce");
    pending_ = true;
  }
  void reduce_scatter_sum_after(void* d, int64_t count, DType t, void* event) override {
    if (count <= 0) return;
    const ncclDataType_t type = nccl_type(t);
    char* base = static_cast<char*>(d);
    after(event);
    enqueue([&] {
      return ncclReduceScatter(base, base + int64_t{rank_} * count * int64_t(dtype_size(t)),
                               static_cast<size_t>(count), type, ncclSum, comm_, stream_);
    }, "reduce-scatter");
    pending_ = true;
  }
  void allgather_after(void* d, int64_t bytes, void* event) override {
    if (bytes <= 0) return;
    after(event);
    auto* base = static_cast<char*>(d);
    enqueue([&] {
      return ncclAllGather(base + int64_t{rank_} * bytes, base, static_cast<size_t>(bytes), ncclInt8,
                           comm_, stream_);
    }, "all-gather");
    pending_ = true;
  }
  void send_after(const void* d, int64_t bytes, int peer) override {
    point_to_point(const_cast<void*>(d), bytes, peer, true);
  }
  void recv_after(void* d, int64_t bytes, int peer) override {
    point_to_point(d, bytes, peer, false);
  }
  void group_begin() override {
    if (!comm_) die(fmt::format("rank {}: the NCCL communicator was aborted earlier", rank_));
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) fail_nccl(r, "group start");
  }
  void group_end() override {
    enqueue([&] { return ncclGroupEnd(); }, "group of collectives");
  }
  void record(void* event) override {
    cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_), "event record");
  }

 private:
  // Blocking unless AISCALE_NCCL_BLOCKING=0 (then each call is polled instead of watched).
  static bool blocking() { return env::flag("AISCALE_NCCL_BLOCKING"); }
  static ncclConfig_t make_config(const char* name) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking() ? 1 : 0;
    config.commName = name;
    return config;
  }

  // A blocking communicator's calls are bounded by the monitor's thread.
  void watch_calls() {
    if (blocking() && !monitor_) monitor_ = std::make_unique<NcclCallMonitor>(rank_, world_, timeout_s_);
  }

  // Takes a communicator made by ncclCommSplit once it has settled.
  void adopt(ncclComm_t comm) {
    comm_ = comm;
    settle("set-up of a sub-group");
    ncclResult_t r = ncclCommUserRank(comm_, &rank_);
    if (r == ncclSuccess) r = ncclCommCount(comm_, &world_);
    if (r != ncclSuccess) fail_nccl(r, "query of a sub-group's rank");
    if (monitor_) monitor_->set_rank(rank_, world_);
  }

  // A few host values (a step's loss, a norm, a stop flag) go through the MPI bootstrap
  // when there is one: no GPU work (the staged path costs two copies and an NCCL kernel
  // that must find an SM beside the model's kernels). The session's watchdog bounds these
  // calls like any other.
  bool small_host_values(const void* d, int64_t n) const {
    return bootstrap_ && bootstrap_->world() == world_ && n > 0 && n <= 1024 &&
           !cuda_is_device_pointer(d);
  }

  void reduce(void* d, int64_t n, ncclDataType_t type, size_t elem) {
    blocking_collective(d, n, elem, "all-reduce", [&](void* buf, size_t count) {
      return ncclAllReduce(buf, buf, count, type, ncclSum, comm_, stream_);
    });
  }

  void bcast(void* d, int64_t n, ncclDataType_t type, size_t elem, int root) {
    blocking_collective(d, n, elem, "broadcast", [&](void* buf, size_t count) {
      return ncclBroadcast(buf, buf, count, type, root, comm_, stream_);
    });
  }

  // An in-place collective that returns when it is complete: on device memory after all
  // the GPU's queued work (the data may come from any stream: the model has its own), on
  // host memory through the staging buffer.
  template <typename Call>
  void blocking_collective(void* d, int64_t n, size_t elem, const char* what, Call&& call) {
    if (n <= 0) return;
    finish_pending();
    auto op = [&](void* buf, size_t count) { enqueue([&] { return call(buf, count); }, what); };
    if (cuda_is_device_pointer(d)) {
      cuda_check(cudaDeviceSynchronize(), ("synchronize before the " + std::string(what)).c_str());
      op(d, static_cast<size_t>(n));
      wait_stream(what);
    } else {
      staged(d, static_cast<size_t>(n), elem, op, what);
    }
  }

  // Host memory: through the device staging buffer, one chunk at a time.
  template <typename Op>
  void staged(void* host, size_t n, size_t elem, Op&& op, const char* what) {
    const size_t chunk = kScratchBytes / elem;
    auto* p = static_cast<char*>(host);
    for (size_t off = 0; off < n; off += chunk) {
      const size_t count = std::min(chunk, n - off), bytes = count * elem;
      cuda_check(cudaMemcpyAsync(scratch_, p + off * elem, bytes, cudaMemcpyHostToDevice, stream_),
                 "copy to the staging buffer");
      op(scratch_, count);
      wait_stream(what);  // bounded wait first: the copy back below would block unbounded
      cuda_check(cudaMemcpy(p + off * elem, scratch_, bytes, cudaMemcpyDeviceToHost),
                 "copy from the staging buffer");
    }
  }

  static ncclDataType_t nccl_type(DType t) {
    switch (t) {
      case DType::f32: return ncclFloat;
      case DType::bf16: return ncclBfloat16;
      case DType::f16: return ncclHalf;
    }
    fail("unsupported data type for an NCCL collective");
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= world_ || peer == rank_)
      fail("internal: rank {} of {} cannot {} to/from rank {} over NCCL", rank_, world_, what, peer);
  }

  // An NCCL send (or receive) of `bytes` to (from) `peer` after the work queued so far.
  void point_to_point(void* d, int64_t bytes, int peer, bool send) {
    if (bytes <= 0) return;
    const char* what = send ? "send" : "receive";
    check_peer(peer, what);
    after(nullptr);
    const size_t n = static_cast<size_t>(bytes);
    enqueue([&] {
      return send ? ncclSend(d, n, ncclInt8, peer, comm_, stream_)
                  : ncclRecv(d, n, ncclInt8, peer, comm_, stream_);
    }, what);
    pending_ = true;
  }

  void after(void* event) {
    if (!comm_) die(fmt::format("rank {}: the NCCL communicator was aborted earlier", rank_));
    if (event)
      cuda_check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event), 0),
                 "stream wait before a collective");
  }

  void finish_pending() {
    if (pending_) wait_stream("queued collectives");
  }

  // Calls an NCCL enqueue function; a non-blocking communicator may answer "in progress"
  // (e.g. while it connects to peers on first use), then it must settle before the next call.
  template <typename Call>
  void enqueue(Call&& call, const char* what) {
    ncclResult_t r = ncclSuccess;
    {
      NcclCallMonitor::Scope watched(monitor_.get(), what);
      r = call();
    }
    if (r == ncclInProgress) settle(what);
    else if (r != ncclSuccess) fail_nccl(r, what);
  }

  // Polls the communicator's state until it leaves "in progress".
  void settle(const char* what) {
    const auto start = Clock::now();
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclInProgress;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail_nccl(r, what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail_nccl(state, what);
      check_deadline(start, what);
      backoff(spins);
    }
  }

  // Waits for the communicator's stream, watching for NCCL errors and the deadline.
  void wait_stream(const char* what) {
    const auto start = Clock::now();
    for (int spins = 0;; ++spins) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady)
        die(fmt::format("rank {}: CUDA error during the NCCL {}: {}", rank_, what, cudaGetErrorString(q)));
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress)
        fail_nccl(state, what);
      check_deadline(start, what);
      backoff(spins);
    }
    pending_ = false;
  }

  static void backoff(int spins) {
    if (spins < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 500));
  }

  void check_deadline(Clock::time_point start, const char* what) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_s_)
      die(fmt::format("rank {} of {}: NCCL {} did not complete within {:.0f} s: a peer rank has "
                      "probably died or hangs; aborted the NCCL communicator (raise "
                      "parallel.timeout_s if steps are that slow)", rank_, world_, what, timeout_s_));
  }

  [[noreturn]] void fail_nccl(ncclResult_t r, const char* what) {
    const char* detail = comm_ ? ncclGetLastError(comm_) : "";
    die(fmt::format("rank {} of {}: NCCL {} failed: {}{}{}{}", rank_, world_, what,
                    ncclGetErrorString(r), detail && *detail ? " (" : "", detail ? detail : "",
                    detail && *detail ? ")" : "") +
        (r == ncclRemoteError || r == ncclSystemError ? ": a peer rank has probably died" : ""));
  }

  // Aborts the communicator and throws; if the abort itself hangs (a wedged GPU), the
  // process ends with exit code 3 after saying why.
  [[noreturn]] void die(const std::string& message) {
    if (!abort_communicator()) {
      log::error("{}; the NCCL abort did not finish in 10 s: ending the process", message);
      std::_Exit(3);
    }
    throw Error(message);
  }

  // ncclCommAbort, bounded: true when it returned (or there was nothing to abort).
  bool abort_communicator() {
    if (!comm_) return true;
    ncclComm_t c = comm_;
    comm_ = nullptr;
    aborted_ = true;
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([c, done] {
      ncclCommAbort(c);
      done->store(true);
    }).detach();
    const auto start = Clock::now();
    while (!done->load() && Clock::now() - start < std::chrono::seconds(10))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done->load();
  }

  std::unique_ptr<Communicator> bootstrap_;  // MPI, when it carried the unique id
  int rank_ = 0, world_ = 1;
  double timeout_s_ = 300;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<NcclCallMonitor> monitor_;  // blocking communicators only
  ncclComm_t split_slot_ = nullptr;  // where a split writes "no communicator" for a rank in no group
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  bool pending_ = false;
  bool aborted_ = false;
};

}  // namespace

bool nccl_compiled() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& o) {
  Rendezvous rv = parse_rendezvous(o.rendezvous);
  const LaunchEnv env = launch_env();
  std::unique_ptr<Communicator> mpi;
  int rank = 0, world = 1, local = -1;
  std::string how;
  const bool use_mpi = rv.kind == Rendezvous::Kind::mpi ||
                       (rv.kind == Rendezvous::Kind::automatic && env.mpi_launcher());
  // torchrun-style launchers give RANK/WORLD_SIZE and MASTER_ADDR:MASTER_PORT; aiscale's
  // store takes MASTER_PORT+1 where torchrun's agent serves its own there (launch_env.h).
  if (rv.kind == Rendezvous::Kind::automatic && env.source == "env" && env.world > 1)
    rv = tcp_rendezvous_from(env);
  if (use_mpi) {
    mpi = make_mpi_communicator();
    rank = mpi->rank();
    world = mpi->world();
    local = env.local_rank >= 0 && env.world == world ? env.local_rank : mpi_node_local_rank();
    how = "MPI";
  } else if (rv.kind == Rendezvous::Kind::file || rv.kind == Rendezvous::Kind::tcp) {
    rank = env.rank;
    world = env.world;
    local = env.local_rank;
    if (world > 1 && local < 0) {
      log::warn("rank {}: the launcher ({}) gives no node-local rank (LOCAL_RANK, SLURM_LOCALID, "
                "OMPI_COMM_WORLD_LOCAL_RANK): taking GPU rank % GPUs", rank, env.source);
      local = rank;
    }
  } else if (env.world > 1) {
    fail("this process was started by {} as rank {} of {} without MPI, so the NCCL ranks cannot "
         "find each other: set parallel.rendezvous = \"file:/shared/path\" (a folder every node "
         "can read) or \"tcp://host:port\" (rank 0's host), or launch with mpirun or srun "
         "--mpi=pmix", env.source, env.rank, env.world);
  }
  const int device = cuda_select_local_gpu(local);

  ncclUniqueId id{};
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      fail("NCCL could not create its unique id: {} ({}); check the network interfaces "
           "(NCCL_SOCKET_IFNAME)", ncclGetErrorString(r), ncclGetLastError(nullptr));
  }
  const std::string_view id_bytes(id.internal, sizeof id.internal);
  auto take_id = [&](const std::string& blob, const std::string& where) {
    if (blob.size() != sizeof id.internal)
      fail("the NCCL id from {} holds {} bytes, not {}: was it written by another aiscale "
           "version?", where, blob.size(), sizeof id.internal);
    std::memcpy(id.internal, blob.data(), blob.size());
  };
  RendezvousWait wait;
  wait.timeout_s = o.timeout_s;
  wait.not_before = wall_clock_s();
  std::string rdv_path;
  std::unique_ptr<Store> store;  // the TCP store; rank 0's serves it until every rank joined
  if (mpi) {
    mpi->broadcast_bytes(&id, sizeof id, 0);
  } else if (rv.kind == Rendezvous::Kind::file && world > 1) {
    rdv_path = rendezvous_file_for_job(rv.path, [](const char* n) { return std::getenv(n); });
    how = "file " + rdv_path;
    if (rank == 0) rendezvous_publish(rdv_path, id_bytes, world);
    else take_id(rendezvous_wait(rdv_path, world, rank, wait), rdv_path);
  } else if (rv.kind == Rendezvous::Kind::tcp && world > 1) {
    store = make_tcp_store(rv.host, rv.port, rank == 0, o.timeout_s, rv.port_origin);
    how = store->where();
    const std::string key = store_key_prefix(env) + "nccl_unique_id";
    wait.not_before = 0;  // a fresh store per job: nothing stale to skip, whatever the clocks
    if (rank == 0) rendezvous_publish(*store, key, id_bytes, world);
    else take_id(rendezvous_wait(*store, key, world, rank, wait), store->where());
  } else {
    how = "none (one rank)";
  }
  auto comm = std::make_unique<NcclCommunicator>(std::move(mpi), o.timeout_s);
  comm->init_rank(rank, world, id);
  store.reset();  // every rank has joined, so every rank has read the id
  if (!rdv_path.empty() && rank == 0) {
    std::error_code ec;
    std::filesystem::remove(rdv_path, ec);
  }
  if (rank == 0)
    log::info("NCCL {}: {} rank(s), one GPU each (rank 0 on GPU {}: {}), ids exchanged through {}",
              nccl_version(), world, device, cuda_current_gpu_name(), how);
  return comm;
}

#else  // built without NCCL

bool nccl_compiled() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions&) {
  fail("this aiscale was built without NCCL: install NCCL (nccl.h and libnccl) and rebuild with "
       "the cuda preset, or use parallel.communicator = \"mpi\"");
}

#endif

}  // namespace aiscale::parallel
