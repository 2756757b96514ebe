// MPI communicator for CPU ranks (launched by mpirun, srun or `aiscale launch`), also the
// host side of GPU ranks over MPI (host_staged.cpp).
#include "aiscale/parallel/comm.h"

#include <cstdlib>
#include <deque>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/algorithms/hierarchical.h"
#include "aiscale/parallel/algorithms/ring.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/launch_env.h"
#include "aiscale/parallel/mpi_error.h"

#ifdef AISCALE_HAVE_MPI
#include <mpi.h>
#endif

namespace aiscale::parallel {

int launched_world_size() {
  // Whichever launcher started us says how many ranks, read as launch_env reads it
  // (torchrun-style RANK/WORLD_SIZE, OpenMPI, MPICH/PMI, PMIx, Slurm): a variable that is
  // set but not a count stops the run naming it, instead of meaning one rank.
  const LaunchEnv e = launch_env();
  if (!e.source.empty()) return e.world;
  return 1;
}

#ifdef AISCALE_HAVE_MPI
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fail("MPI {} failed: {}", what, mpi_error_text(rc));
}

// The point-to-point messages of the hand-written all-reduce algorithms, on `comm`.
class MpiLinks final : public algorithms::PeerLinks {
 public:
  MpiLinks(MPI_Comm comm, int rank, int world) : comm_(comm), rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int isend(const float* data, int64_t n, int peer, int tag) override {
    requests_.emplace_back();
    check(MPI_Isend(data, static_cast<int>(n), MPI_FLOAT, peer, tag, comm_, &requests_.back()),
          "send (all-reduce algorithm)");
    return static_cast<int>(requests_.size()) - 1;
  }
  int irecv(float* data, int64_t n, int peer, int tag) override {
    requests_.emplace_back();
    check(MPI_Irecv(data, static_cast<int>(n), MPI_FLOAT, peer, tag, comm_, &requests_.back()),
          "receive (all-reduce algorithm)");
    return static_cast<int>(requests_.size()) - 1;
  }
  void wait(int id) override {
    check(MPI_Wait(&requests_[static_cast<size_t>(id)], MPI_STATUS_IGNORE), "wait (all-reduce algorithm)");
  }
  void wait_all() override {
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
          "wait (all-reduce algorithm)");
    requests_.clear();
  }

 private:
  MPI_Comm comm_;
  int rank_, world_;
  std::vector<MPI_Request> requests_;
};

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD (initialising MPI when nobody has).
  MpiCommunicator(const algorithms::AllreduceSetting& setting, MpiThreads threads)
      : setting_(setting) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      const int wanted = threads == MpiThreads::any_thread ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
      check(MPI_Init_thread(nullptr, nullptr, wanted, &provided), "init");
      owns_ = true;
    }
    if (threads == MpiThreads::any_thread) require_threads();
    // Errors come back as return codes so that we can report them, not abort silently.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    // srun without an MPI plugin starts N independent singletons: each would train
    // alone on the full data. Refuse instead.
    const int launched = launched_world_size();
    if (launched > 1 && world_ != launched)
      fail("the launcher started {} tasks but MPI sees {} rank(s): under Slurm use "
           "`srun --mpi=pmix` (or pmi2; `srun --mpi=list` shows what the site has), start "
           "the ranks with mpirun, or let CPU ranks talk TCP without MPI: "
           "parallel.rendezvous = \"file:/shared/path\" (a folder every node shares)",
           launched, world_);
    if (setting_.algorithm == algorithms::AllreduceAlgorithm::hierarchical)
      set_up_nodes(setting_.ranks_per_node > 0 ? algorithms::forced_node_key(rank_, setting_.ranks_per_node)
                                               : shared_memory_node_key());
  }
  // A sub-communicator made by split(): this object frees it. It sums with the parent's
  // algorithm; its ranks keep the nodes they were on.
  MpiCommunicator(MPI_Comm sub, const algorithms::AllreduceSetting& setting, int64_t node_key)
      : comm_(sub), frees_comm_(true), setting_(setting) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    if (setting_.algorithm == algorithms::AllreduceAlgorithm::hierarchical) set_up_nodes(node_key);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) reap_sends(true);
    if (frees_comm_ && !finalized) MPI_Comm_free(&comm_);
    if (owns_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "mpi"; }
  void allreduce_sum(float* data, int64_t n) override {
    MpiLinks links(comm_, rank_, world_);
    if (setting_.algorithm == algorithms::AllreduceAlgorithm::ring) {
      algorithms::ring_allreduce_sum(links, data, n, setting_.chunk_floats);
      return;
    }
    if (setting_.algorithm == algorithms::AllreduceAlgorithm::hierarchical) {
      algorithms::hierarchical_allreduce_sum(links, nodes_, data, n, setting_.chunk_floats);
      return;
    }
    // Gradient buckets of kBucketFloats (25 MiB, PyTorch DDP's default): every bucket's
    // non-blocking all-reduce is posted at once, so MPI pipelines them (one bucket on the
    // wire while the next is summed) instead of one monolithic call; it also keeps MPI's
    // int counts far from overflow.
    constexpr int64_t kBucketFloats = int64_t{25} << 18;  // 25 MiB of fp32
    if (n <= kBucketFloats) {
      check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                          comm_), "all-reduce");
      return;
    }
    requests_.clear();
    for (int64_t off = 0; off < n; off += kBucketFloats) {
      requests_.emplace_back();
      int count = static_cast<int>(std::min(kBucketFloats, n - off));
      check(MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, comm_,
                           &requests_.back()), "all-reduce (bucket)");
    }
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
          "all-reduce (wait)");
  }
  void allreduce_sum(double* data, int64_t n) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, comm_),
          "all-reduce");
  }
  void broadcast(float* data, int64_t n, int root) override {
    const int64_t chunk = int64_t{1} << 30;
    for (int64_t off = 0; off < n; off += chunk)
      check(MPI_Bcast(data + off, static_cast<int>(std::min(chunk, n - off)), MPI_FLOAT, root,
                      comm_), "broadcast");
  }
  void broadcast_bytes(void* data, int64_t bytes, int root) override {
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_), "broadcast");
  }
  void allgather(const float* in, float* out, int64_t count) override {
    check(MPI_Allgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                        MPI_FLOAT, comm_), "all-gather");
  }
  void allgather_async(const float* in, float* out, int64_t count) override {
    gathers_.emplace_back();
    check(MPI_Iallgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                         MPI_FLOAT, comm_, &gathers_.back()), "all-gather (start)");
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t count) override {
    check(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_),
          "reduce-scatter");
  }
  // Sends never wait for the receiver: the message is copied and posted (MPI_Isend), so
  // that two stages sending to each other at once cannot block each other. Completed
  // sends are reaped on the next call; wait() and the destructor complete the rest.
  void send(const float* data, int64_t n, int peer) override {
    reap_sends(false);
    pending_.push_back({std::vector<float>(data, data + n), MPI_REQUEST_NULL});
    Pending& p = pending_.back();
    check(MPI_Isend(p.data.data(), static_cast<int>(n), MPI_FLOAT, peer, kStageTag, comm_,
                    &p.request), "send");
  }
  void wait() override {
    reap_sends(true);
    if (gathers_.empty()) return;
    check(MPI_Waitall(static_cast<int>(gathers_.size()), gathers_.data(), MPI_STATUSES_IGNORE),
          "all-gather (wait)");
    gathers_.clear();
  }
  void recv(float* data, int64_t n, int peer) override {
    check(MPI_Recv(data, static_cast<int>(n), MPI_FLOAT, peer, kStageTag, comm_,
                   MPI_STATUS_IGNORE), "receive");
  }
  void barrier() override { check(MPI_Barrier(comm_), "barrier"); }
  // Ends the whole job, not only this group: a rank that cannot go on stops them all.
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub),
          "split into sub-groups");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(sub, setting_, node_key_);
  }

 private:
  // GPU ranks call MPI from the reducer's thread as well as the model's, one at a time
  // (their staging takes turns: host_staged.cpp).
  static void require_threads() {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided >= MPI_THREAD_SERIALIZED) return;
    fail("GPU ranks over MPI call MPI from two threads (the model's and the gradient reducer's), "
         "one at a time, but this MPI library grants thread level {} only (MPI_THREAD_SERIALIZED "
         "or MPI_THREAD_MULTIPLE needed): use an MPI built with thread support (Open MPI's and "
         "MPICH's packages are), or parallel.communicator = \"nccl\" or \"tcp\"",
         provided == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED");
  }

  // The node of this rank as MPI sees it: the lowest world rank among the ranks that share
  // its memory (the same for every rank of one host).
  int64_t shared_memory_node_key() {
    MPI_Comm node;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "split by node");
    int lowest = rank_;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
    check(rc, "find the node's lowest rank");
    return lowest;
  }
  // Every rank's node key, gathered (collective), for the hierarchical all-reduce.
  void set_up_nodes(int64_t key) {
    node_key_ = key;
    std::vector<long long> keys(static_cast<size_t>(world_));
    long long mine = key;
    check(MPI_Allgather(&mine, 1, MPI_LONG_LONG, keys.data(), 1, MPI_LONG_LONG, comm_),
          "gather the ranks' nodes");
    nodes_ = algorithms::topology_from_node_keys(std::vector<int64_t>(keys.begin(), keys.end()));
  }

  void reap_sends(bool all) {
    while (!pending_.empty()) {
      int done = 0;
      if (all) check(MPI_Wait(&pending_.front().request, MPI_STATUS_IGNORE), "send (wait)");
      else check(MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE), "send (test)");
      if (!all && !done) return;
      pending_.pop_front();
    }
  }
  struct Pending {
    std::vector<float> data;
    MPI_Request request;
  };
  std::deque<Pending> pending_;  // point-to-point sends in flight, oldest first
  std::vector<MPI_Request> gathers_;  // all-gathers started by allgather_async
  static constexpr int kStageTag = 17;  // tag of the point-to-point messages
  MPI_Comm comm_ = MPI_COMM_WORLD;
  bool frees_comm_ = false;  // a split's communicator, freed with this object
  int rank_ = 0, world_ = 1;
  bool owns_ = false;        // initialised MPI, so finalises it
  std::vector<MPI_Request> requests_;  // one per gradient bucket in flight
  algorithms::AllreduceSetting setting_;  // parallel.allreduce: how allreduce_sum(float*) sums
  int64_t node_key_ = 0;                  // this rank's node (hierarchical)
  algorithms::NodeTopology nodes_;        // every rank's node (hierarchical)
};

}  // namespace
#endif

std::unique_ptr<Communicator> make_mpi_communicator(const algorithms::AllreduceSetting& setting,
                                                    MpiThreads threads) {
#ifdef AISCALE_HAVE_MPI
  return std::make_unique<MpiCommunicator>(setting, threads);
#else
  (void)threads;
  fail("this process was started as one of {} ranks, but aiscale was built without MPI: install "
       "libopenmpi-dev (scripts/setup.sh) and rebuild", launched_world_size());
#endif
}

int mpi_node_local_rank() {
#ifdef AISCALE_HAVE_MPI
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
        "split by node");
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
#else
  return -1;
#endif
}

bool mpi_threads_concurrent() {
#ifdef AISCALE_HAVE_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_MULTIPLE;
#else
  return false;
#endif
}

bool mpi_compiled() {
#ifdef AISCALE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace aiscale::parallel
