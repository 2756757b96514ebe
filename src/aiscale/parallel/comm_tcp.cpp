// The TCP communicator (comm_tcp.h) and its start from the launcher's environment.
#include "aiscale/parallel/comm_tcp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/algorithms/hierarchical.h"
#include "aiscale/parallel/algorithms/ring.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/job_store.h"
#include "aiscale/parallel/launch_env.h"
#include "aiscale/parallel/store.h"
#include "aiscale/parallel/tcp_mesh.h"
#include "aiscale/parallel/tcp_socket.h"

namespace aiscale::parallel {
namespace {

// Message tags of the collectives (the ring's and the hierarchical algorithm's are in
// algorithms/peer_links.h; the pipeline stages' is MPI's too).
constexpr int kStageTag = 17;
constexpr int kSumTag = 3001;
constexpr int kBroadcastTag = 3002;
constexpr int kGatherTag = 3003;
constexpr int kScatterTag = 3004;
constexpr int kBarrierTag = 3005;
constexpr int kSplitTag = 3006;
constexpr int kNodeTag = 3007;

class TcpCommunicator final : public Communicator {
 public:
  // `node_key`: this rank's node for the hierarchical algorithm, -1 to find it (the world).
  TcpCommunicator(std::shared_ptr<Store> store, std::string prefix, int rank,
                  std::vector<int> world_ranks, const TcpOptions& options, int64_t node_key)
      : store_(std::move(store)), prefix_(std::move(prefix)), options_(options),
        world_ranks_(world_ranks),
        mesh_(store_.get(), prefix_, rank, std::move(world_ranks), options.timeout_s,
              options.advertise) {
    // Every member has connected and read what it needed from the store before any leaves
    // (rank 0 may then stop serving the store once nothing else is split).
    barrier();
    if (options_.setting.algorithm == algorithms::AllreduceAlgorithm::hierarchical)
      set_up_nodes(node_key);
  }

  int rank() const override { return mesh_.rank(); }
  int world() const override { return mesh_.world(); }
  std::string backend() const override { return "tcp"; }

  void allreduce_sum(float* data, int64_t n) override {
    if (world() == 1 || n <= 0) return;
    mesh_.set_activity("all-reduce");
    const auto& s = options_.setting;
    if (s.algorithm == algorithms::AllreduceAlgorithm::hierarchical)
      algorithms::hierarchical_allreduce_sum(mesh_, nodes_, data, n, s.chunk_floats);
    else if (s.algorithm == algorithms::AllreduceAlgorithm::ring || !small(n * 4))
      algorithms::ring_allreduce_sum(mesh_, data, n, s.chunk_floats);
    else
      sum_everywhere(data, n);
  }
  void allreduce_sum(double* data, int64_t n) override {
    if (world() == 1 || n <= 0) return;
    mesh_.set_activity("all-reduce");
    if (small(n * 8)) sum_everywhere(data, n);
    else sum_scattered(data, n);
  }
  void broadcast(float* data, int64_t n, int root) override { broadcast_bytes(data, n * 4, root); }
  void broadcast_bytes(void* data, int64_t bytes, int root) override {
    check_peer(root, "broadcast root");
    if (world() == 1 || bytes <= 0) return;
    mesh_.set_activity("broadcast");
    // A binomial tree: log2(world) rounds, each rank receives once from its parent.
    const int w = world(), v = (rank() - root + w) % w;
    int mask = 1;
    for (; mask < w; mask <<= 1)
      if (v & mask) {
        mesh_.wait(mesh_.irecv_bytes(data, bytes, (v - mask + root) % w, kBroadcastTag));
        break;
      }
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (v + mask < w) mesh_.isend_bytes(data, bytes, (v + mask + root) % w, kBroadcastTag);
    mesh_.wait_all();
  }
  void barrier() override {
    if (world() == 1) return;
    mesh_.set_activity("barrier");
    // Dissemination: in round k each rank signals rank + 2^k and hears from rank - 2^k.
    for (int k = 1; k < world(); k <<= 1) {
      mesh_.isend_bytes(nullptr, 0, (rank() + k) % world(), kBarrierTag);
      mesh_.irecv_bytes(nullptr, 0, (rank() - k + world()) % world(), kBarrierTag);
      mesh_.wait_all();
    }
  }
  // Closes every connection, so that each peer fails at once naming this rank, then ends
  // the process (the groups' connections close with it).
  void abort(int code) override {
    mesh_.close_all();
    std::_Exit(code);
  }
  void allgather(const float* in, float* out, int64_t count) override {
    mesh_.set_activity("all-gather");
    gather_bytes(in, out, count * 4, kGatherTag);
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t count) override {
    mesh_.set_activity("reduce-scatter");
    reduce_scatter_in_rank_order(in, out, count);
  }
  // Copied at once, so a stage never waits for its receiver; wait() completes them.
  void send(const float* data, int64_t n, int peer) override {
    check_peer(peer, "send to rank");
    mesh_.set_activity("send");
    mesh_.send_copy(data, n * 4, peer, kStageTag);
  }
  void recv(float* data, int64_t n, int peer) override {
    check_peer(peer, "receive from rank");
    mesh_.set_activity("receive");
    mesh_.wait(mesh_.irecv_bytes(data, n * 4, peer, kStageTag));
  }
  void wait() override {
    mesh_.set_activity("send");
    mesh_.flush();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    mesh_.set_activity("split into sub-groups");
    const int64_t mine[2] = {color < 0 ? -1 : color, key};
    std::vector<int64_t> all(static_cast<size_t>(2 * world()));
    gather_bytes(mine, all.data(), sizeof mine, kSplitTag);
    const int seq = ++splits_;
    if (color < 0) return nullptr;
    std::vector<int> members;
    for (int r = 0; r < world(); ++r)
      if (all[static_cast<size_t>(2 * r)] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[static_cast<size_t>(2 * a + 1)] < all[static_cast<size_t>(2 * b + 1)];
    });
    std::vector<int> ranks;
    int new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == rank()) new_rank = static_cast<int>(i);
      ranks.push_back(world_ranks_[static_cast<size_t>(members[i])]);
    }
    return std::make_unique<TcpCommunicator>(
        store_, prefix_ + "s" + std::to_string(seq) + "c" + std::to_string(color) + "/", new_rank,
        std::move(ranks), options_, node_key_);
  }

 private:
  bool small(int64_t bytes) const { return bytes * (world() - 1) <= kTcpSmallSumBytes; }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= world())
      fail("internal: TCP {} {} outside the group's {} rank(s)", what, peer, world());
  }

  // Every rank's `bytes` at `in` to every rank: rank r's at out + r * bytes.
  void gather_bytes(const void* in, void* out, int64_t bytes, int tag) {
    char* o = static_cast<char*>(out);
    if (bytes > 0) std::memcpy(o + rank() * bytes, in, static_cast<size_t>(bytes));
    for (int r = 0; r < world(); ++r)
      if (r != rank()) {
        mesh_.irecv_bytes(o + r * bytes, bytes, r, tag);
        mesh_.isend_bytes(in, bytes, r, tag);
      }
    mesh_.wait_all();
  }

  // Every rank receives every rank's buffer and adds them in rank order: one round trip,
  // (world - 1) x n values each way per rank.
  template <typename T>
  void sum_everywhere(T* data, int64_t n) {
    std::vector<T> all(static_cast<size_t>(n * world()));
    gather_bytes(data, all.data(), n * static_cast<int64_t>(sizeof(T)), kSumTag);
    for (int64_t i = 0; i < n; ++i) {
      T s = all[static_cast<size_t>(i)];
      for (int r = 1; r < world(); ++r) s += all[static_cast<size_t>(r * n + i)];
      data[i] = s;
    }
  }

  // Rank r receives segment r of every rank, adds them in rank order and sends the sum to
  // every rank: the bytes of a ring, in two rounds.
  template <typename T>
  void sum_scattered(T* data, int64_t n) {
    const int w = world(), me = rank();
    auto begin = [n, w](int s) { return static_cast<int64_t>(s) * n / w; };
    const int64_t mine = begin(me + 1) - begin(me);
    std::vector<T> parts(static_cast<size_t>(mine * w));
    for (int r = 0; r < w; ++r) {
      if (r == me) continue;
      mesh_.irecv_bytes(parts.data() + r * mine, mine * static_cast<int64_t>(sizeof(T)), r, kScatterTag);
      mesh_.isend_bytes(data + begin(r), (begin(r + 1) - begin(r)) * static_cast<int64_t>(sizeof(T)),
                        r, kScatterTag);
    }
    mesh_.wait_all();
    std::copy(data + begin(me), data + begin(me + 1), parts.begin() + me * mine);
    for (int64_t i = 0; i < mine; ++i) {
      T s = parts[static_cast<size_t>(i)];
      for (int r = 1; r < w; ++r) s += parts[static_cast<size_t>(r * mine + i)];
      data[begin(me) + i] = s;
    }
    for (int r = 0; r < w; ++r) {
      if (r == me) continue;
      mesh_.irecv_bytes(data + begin(r), (begin(r + 1) - begin(r)) * static_cast<int64_t>(sizeof(T)),
                        r, kGatherTag);
      mesh_.isend_bytes(data + begin(me), mine * static_cast<int64_t>(sizeof(T)), r, kGatherTag);
    }
    mesh_.wait_all();
  }

  void reduce_scatter_in_rank_order(const float* in, float* out, int64_t count) {
    const int w = world(), me = rank();
    std::vector<float> parts(static_cast<size_t>(count * w));
    for (int r = 0; r < w; ++r) {
      if (r == me) continue;
      mesh_.irecv_bytes(parts.data() + r * count, count * 4, r, kScatterTag);
      mesh_.isend_bytes(in + r * count, count * 4, r, kScatterTag);
    }
    mesh_.wait_all();
    std::copy(in + me * count, in + (me + 1) * count, parts.begin() + me * count);
    for (int64_t i = 0; i < count; ++i) {
      float s = parts[static_cast<size_t>(i)];
      for (int r = 1; r < w; ++r) s += parts[static_cast<size_t>(r * count + i)];
      out[i] = s;
    }
  }

  // The nodes of the hierarchical algorithm: parallel.ranks_per_node, else the ranks that
  // share a host name; a group keeps the nodes its ranks were on in the world.
  void set_up_nodes(int64_t node_key) {
    mesh_.set_activity("set-up of the nodes");
    if (node_key < 0 && options_.setting.ranks_per_node > 0) {
      node_key = algorithms::forced_node_key(world_ranks_[static_cast<size_t>(rank())],
                                             options_.setting.ranks_per_node);
    } else if (node_key < 0) {
      char mine[256] = {};
      std::strncpy(mine, tcp::host_name().c_str(), sizeof mine - 1);
      std::vector<char> names(sizeof mine * static_cast<size_t>(world()));
      gather_bytes(mine, names.data(), sizeof mine, kNodeTag);
      for (int r = 0; r < world() && node_key < 0; ++r)
        if (std::strncmp(names.data() + r * sizeof mine, mine, sizeof mine) == 0)
          node_key = world_ranks_[static_cast<size_t>(r)];
    }
    node_key_ = node_key;
    std::vector<int64_t> keys(static_cast<size_t>(world()));
    gather_bytes(&node_key_, keys.data(), sizeof node_key_, kNodeTag);
    nodes_ = algorithms::topology_from_node_keys(keys);
  }

  std::shared_ptr<Store> store_;
  std::string prefix_;
  TcpOptions options_;
  std::vector<int> world_ranks_;  // the job's rank of each member
  tcp::Mesh mesh_;
  int splits_ = 0;  // split() calls so far: each group's keys are its own
  int64_t node_key_ = -1;
  algorithms::NodeTopology nodes_;
};

}  // namespace

std::unique_ptr<Communicator> make_tcp_communicator(std::shared_ptr<Store> store,
                                                    const std::string& prefix, int rank, int world,
                                                    const TcpOptions& options) {
  if (world < 1 || rank < 0 || rank >= world)
    fail("internal: TCP communicator rank {} of {}", rank, world);
  std::vector<int> ranks(static_cast<size_t>(world));
  std::iota(ranks.begin(), ranks.end(), 0);
  return std::make_unique<TcpCommunicator>(std::move(store), prefix, rank, std::move(ranks),
                                           options, -1);
}

std::unique_ptr<Communicator> make_tcp_communicator(const CommOptions& o) {
  algorithms::AllreduceSetting setting;
  setting.algorithm = algorithms::parse_allreduce_algorithm(o.allreduce);
  setting.ranks_per_node = o.ranks_per_node;
  const LaunchEnv env = launch_env();
  TcpOptions options;
  options.timeout_s = o.timeout_s;
  options.setting = setting;
  if (env.world <= 1) return make_tcp_communicator(nullptr, "", 0, 1, options);
  JobStore js = open_job_store(parse_rendezvous(o.rendezvous), env, o.timeout_s);
  options.advertise = js.advertise;
  const std::string where = js.store->where();
  auto comm = make_tcp_communicator(js.store, js.prefix + "tcp/", env.rank, env.world, options);
  if (!js.rendezvous_file.empty()) {  // every rank has joined, so every rank has read it
    std::error_code ec;
    std::filesystem::remove(js.rendezvous_file, ec);
  }
  if (env.rank == 0)
    log::info("TCP communicator: {} rank(s) connected to each other, met through the {}",
              env.world, where);
  return comm;
}

}  // namespace aiscale::parallel
