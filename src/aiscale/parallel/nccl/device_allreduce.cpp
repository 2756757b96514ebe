// The communicator that sums a GPU run's fp32 device buffers with the hand-written ring or
// hierarchical algorithm (device_algorithms.h) and passes everything else to the NCCL
// communicator it wraps.
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/nccl/device_algorithms.h"

namespace aiscale::parallel {

#ifdef AISCALE_HAVE_CUDA
namespace {

using algorithms::AllreduceAlgorithm;

// This rank's node key: rank / ranks_per_node when forced, else a hash of the host name
// (52 bits, exact in a double, so that the keys can be gathered by a sum).
int64_t node_key_of(int rank, int ranks_per_node) {
  if (ranks_per_node > 0) return algorithms::forced_node_key(rank, ranks_per_node);
  return static_cast<int64_t>(std::hash<std::string>{}(host_name()) & ((uint64_t{1} << 52) - 1));
}

class DeviceAllreduceCommunicator final : public Communicator {
 public:
  // Collective over inner's ranks (gathers the nodes and splits for the hierarchical one).
  DeviceAllreduceCommunicator(std::unique_ptr<Communicator> inner,
                              const algorithms::AllreduceSetting& setting, int64_t node_key)
      : inner_(std::move(inner)), setting_(setting), node_key_(node_key),
        work_(kDeviceChunkFloats) {
    if (!inner_->device_stream())
      fail("parallel.allreduce = \"{}\" sums device buffers over a device communicator; the {} "
           "communicator has none: use parallel.communicator = \"nccl\"",
           algorithms::allreduce_algorithm_name(setting_.algorithm), inner_->backend());
    if (setting_.algorithm == AllreduceAlgorithm::hierarchical) set_up_nodes();
  }

  ~DeviceAllreduceCommunicator() override {
    if (std::uncaught_exceptions() > 0) return;  // leaving on an error: the peers may be gone
    try {
      wait();  // the scratch buffer goes with this object
    } catch (const Error& e) {
      log::warn("{}", e.what());
    }
  }

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend(); }
  bool on_device() const override { return inner_->on_device(); }

  // fp32 device buffers: the algorithm. Host values (a loss, a norm) and other types: the
  // library's.
  void allreduce_sum(float* d, int64_t n) override {
    if (n <= 0) return;
    if (!cuda_is_device_pointer(d)) return inner_->allreduce_sum(d, n);
    wait();
    device_synchronize_for_allreduce();  // the data may come from any stream
    run(d, n, nullptr);
    wait();
  }
  void allreduce_sum_async(float* d, int64_t n) override {
    if (n <= 0) return;
    if (!cuda_is_device_pointer(d)) return inner_->allreduce_sum(d, n);
    run(d, n, nullptr);
  }
  void allreduce_sum_after(void* d, int64_t n, DType t, void* event) override {
    if (t != DType::f32) return inner_->allreduce_sum_after(d, n, t, event);
    run(static_cast<float*>(d), n, event);
  }
  void wait() override {
    if (node_) node_->wait();
    if (leaders_) leaders_->wait();
    inner_->wait();
  }

  void allreduce_sum(double* d, int64_t n) override { inner_->allreduce_sum(d, n); }
  void broadcast(float* d, int64_t n, int root) override { inner_->broadcast(d, n, root); }
  void broadcast_bytes(void* d, int64_t b, int root) override { inner_->broadcast_bytes(d, b, root); }
  void barrier() override {
    wait();
    inner_->barrier();
  }
  void abort(int code) override { inner_->abort(code); }
  void allgather(const float* in, float* out, int64_t n) override { inner_->allgather(in, out, n); }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    inner_->reduce_scatter_sum(in, out, n);
  }
  void allgather_async(const float* in, float* out, int64_t n) override {
    inner_->allgather_async(in, out, n);
  }
  void send(const float* d, int64_t n, int peer) override { inner_->send(d, n, peer); }
  void recv(float* d, int64_t n, int peer) override { inner_->recv(d, n, peer); }
  void* device_stream() override { return inner_->device_stream(); }
  void reduce_scatter_sum_after(void* d, int64_t count, DType t, void* event) override {
    inner_->reduce_scatter_sum_after(d, count, t, event);
  }
  void allgather_after(void* d, int64_t bytes, void* event) override {
    inner_->allgather_after(d, bytes, event);
  }
  void send_after(const void* d, int64_t bytes, int peer) override { inner_->send_after(d, bytes, peer); }
  void recv_after(void* d, int64_t bytes, int peer) override { inner_->recv_after(d, bytes, peer); }
  void record(void* event) override { inner_->record(event); }
  // No grouping: the algorithms' own groups must end before their add kernels are queued,
  // which an enclosing group would prevent (grouping is only an optimisation).
  void group_begin() override {}
  void group_end() override {}
  // A sub-group sums with the same algorithm; its ranks keep the nodes they are on.
  std::unique_ptr<Communicator> split(int color, int key) override {
    wait();
    auto sub = inner_->split(color, key);
    if (!sub) return nullptr;
    return std::make_unique<DeviceAllreduceCommunicator>(std::move(sub), setting_, node_key_);
  }

 private:
  void run(float* d, int64_t n, void* event) {
    if (setting_.algorithm == AllreduceAlgorithm::ring)
      device_ring_allreduce_sum(*inner_, d, n, event, work_);
    else
      device_hierarchical_allreduce_sum(*inner_, *node_, leaders_.get(), d, n, event, work_);
  }

  // Every rank's node key (a sum of one slot per rank: exact, the keys fit 52 bits), the
  // node communicator (ranks of one node, by rank) and the leaders' (each node's lowest rank).
  void set_up_nodes() {
    const int w = inner_->world(), r = inner_->rank();
    std::vector<double> keys(static_cast<size_t>(w), 0.0);
    keys[static_cast<size_t>(r)] = static_cast<double>(node_key_);
    inner_->allreduce_sum(keys.data(), w);
    std::vector<int64_t> key_of_rank(keys.begin(), keys.end());
    topology_ = algorithms::topology_from_node_keys(key_of_rank);
    const int node_index = topology_.node_of[static_cast<size_t>(r)];
    const bool leader = topology_.nodes[static_cast<size_t>(node_index)].front() == r;
    node_ = inner_->split(node_index, r);
    leaders_ = inner_->split(leader ? 0 : kNoGroup, r);
    if (!node_) fail("internal: rank {} has no node communicator", r);
  }

  std::unique_ptr<Communicator> inner_;
  algorithms::AllreduceSetting setting_;
  int64_t node_key_;
  DeviceAllreduceWork work_;
  algorithms::NodeTopology topology_;
  std::unique_ptr<Communicator> node_, leaders_;  // hierarchical; leaders_ only on a leader
};

}  // namespace

std::unique_ptr<Communicator> with_device_allreduce(std::unique_ptr<Communicator> inner,
                                                    const algorithms::AllreduceSetting& setting) {
  if (setting.algorithm == algorithms::AllreduceAlgorithm::library) return inner;
  const int64_t key = node_key_of(inner->rank(), setting.ranks_per_node);
  return std::make_unique<DeviceAllreduceCommunicator>(std::move(inner), setting, key);
}

#else  // built without CUDA

std::unique_ptr<Communicator> with_device_allreduce(std::unique_ptr<Communicator> inner,
                                                    const algorithms::AllreduceSetting& setting) {
  if (setting.algorithm == algorithms::AllreduceAlgorithm::library) return inner;
  fail("parallel.allreduce = \"{}\" on GPUs needs a CUDA build with NCCL",
       algorithms::allreduce_algorithm_name(setting.algorithm));
}

#endif

}  // namespace aiscale::parallel
