#include "aiscale/bench/allreduce.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/bootstrap.h"

#ifdef AISCALE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace aiscale::bench {
namespace {

// The benchmark's buffer: device memory for a device communicator, host memory else.
class Buffer {
 public:
  Buffer(int64_t count, bool device) : device_(device) {
    if (!device_) {
      host_.resize(static_cast<size_t>(count));
      return;
    }
#ifdef AISCALE_HAVE_CUDA
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(count) * 4) != cudaSuccess)
      fail("cannot allocate {} MiB on the GPU for the all-reduce benchmark: lower --max-bytes",
           count * 4 >> 20);
    dev_ = static_cast<float*>(p);
#else
    fail("the nccl backend needs a CUDA build");
#endif
  }
  ~Buffer() {
#ifdef AISCALE_HAVE_CUDA
    if (dev_) cudaFree(dev_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() { return device_ ? dev_ : host_.data(); }
  // Copies n values in or out (synchronously: the data is ready when this returns).
  void put(const std::vector<float>& v) {
    if (!device_) {
      std::copy(v.begin(), v.end(), host_.begin());
      return;
    }
#ifdef AISCALE_HAVE_CUDA
    if (cudaMemcpy(dev_, v.data(), v.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
      fail("copy to the GPU failed");
#endif
  }
  void get(std::vector<float>& v) {
    if (!device_) {
      std::copy(host_.begin(), host_.begin() + static_cast<int64_t>(v.size()), v.begin());
      return;
    }
#ifdef AISCALE_HAVE_CUDA
    if (cudaMemcpy(v.data(), dev_, v.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
      fail("copy from the GPU failed");
#endif
  }

 private:
  bool device_;
  std::vector<float> host_;
  float* dev_ = nullptr;
};

// Values exact in fp32 whatever the order of the sum: small multiples of 1/8.
float pattern(int64_t i, int rank) {
  return static_cast<float>((rank + 1) * ((i % 13) + 1)) * 0.125f;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<int64_t> allreduce_bench_sizes(const AllreduceBenchOptions& o) {
  if (o.min_bytes < 4) fail("--min-bytes {} is below one fp32 value (4 bytes)", o.min_bytes);
  if (o.max_bytes < o.min_bytes)
    fail("--max-bytes {} is below --min-bytes {}", o.max_bytes, o.min_bytes);
  if (o.step_factor < 2) fail("--step-factor {} must be at least 2", o.step_factor);
  if (o.iters < 1) fail("--iters must be at least 1");
  if (o.repeats < 1) fail("--repeats must be at least 1");
  if (o.algorithm != "library" && o.algorithm != "ring" && o.algorithm != "hierarchical")
    fail("--algorithm '{}' is not known: use library, ring or hierarchical", o.algorithm);
  if (o.ranks_per_node > 0 && o.algorithm != "hierarchical")
    fail("--ranks-per-node sets the nodes of the hierarchical algorithm: add --algorithm "
         "hierarchical, or leave it out");
  std::vector<int64_t> sizes;
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= o.step_factor) {
    sizes.push_back(b / 4 * 4);
    if (b > o.max_bytes / o.step_factor) break;
  }
  return sizes;
}

void run_allreduce_bench(const AllreduceBenchOptions& o, parallel::Communicator& comm,
                         const std::function<void(const nlohmann::json&)>& on_result) {
  if (o.backend != "nccl" && o.backend != "mpi" && o.backend != "tcp")
    fail("--backend '{}' is not known: use nccl, mpi or tcp", o.backend);
  const std::vector<int64_t> sizes = allreduce_bench_sizes(o);
  const int world = comm.world(), rank = comm.rank();
  const bool device = comm.on_device();
  const std::string device_name =
      device ? parallel::cuda_current_gpu_name() : cpu_model_name();
  std::string system = o.system;
  if (system.empty())
    if (const char* s = std::getenv("SLURM_CLUSTER_NAME")) system = s;
  int64_t nodes = o.nodes;
  if (nodes == 0)
    if (const char* n = std::getenv("SLURM_JOB_NUM_NODES")) nodes = std::atoll(n);
  const std::string host = host_name(), date = utc_iso8601();

  Buffer buf(sizes.back() / 4, device);
  std::vector<float> values;
  std::vector<double> times(static_cast<size_t>(world));
  int64_t wrong_sizes = 0;
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / 4;
    // One checked all-reduce of the pattern (exact sums), then warm-up and timing.
    values.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = pattern(i, rank);
    buf.put(values);
    comm.allreduce_sum(buf.data(), count);
    double bad = 0;
    if (o.check) {
      buf.get(values);
      const float ranks_sum = static_cast<float>(world) * static_cast<float>(world + 1) / 2;
      for (int64_t i = 0; i < count; ++i)
        if (values[static_cast<size_t>(i)] != ranks_sum * pattern(i, 0)) bad += 1;
      comm.allreduce_sum(&bad, 1);
      if (bad > 0) ++wrong_sizes;
    }
    for (int64_t i = 0; i < o.warmup; ++i) comm.allreduce_sum_async(buf.data(), count);
    comm.wait();
    // Each timed loop: `iters` all-reduces queued back to back, one wait at the end (so
    // host-side waiting is paid once per loop, as in nccl-tests). The median of the loops
    // counts: small messages take tens of microseconds and one late wake-up shows.
    std::vector<double> loops;
    for (int64_t rep = 0; rep < o.repeats; ++rep) {
      comm.barrier();
      const double start = now_s();
      for (int64_t i = 0; i < o.iters; ++i) comm.allreduce_sum_async(buf.data(), count);
      comm.wait();
      loops.push_back((now_s() - start) / static_cast<double>(o.iters));
    }
    std::sort(loops.begin(), loops.end());
    const double elapsed = loops[loops.size() / 2];
    // The slowest rank's time: every rank's figure, summed into its own slot.
    std::fill(times.begin(), times.end(), 0.0);
    times[static_cast<size_t>(rank)] = elapsed;
    comm.allreduce_sum(times.data(), world);
    const double t = *std::max_element(times.begin(), times.end());
    if (rank != 0) continue;
    const double algbw = static_cast<double>(bytes) / t / 1e9;
    nlohmann::json j;
    j["benchmark"] = "allreduce";
    j["backend"] = o.backend;
    j["algorithm"] = o.algorithm;
    if (o.ranks_per_node > 0) j["ranks_per_node"] = o.ranks_per_node;
    j["world_size"] = world;
    j["bytes"] = bytes;
    j["count"] = count;
    j["dtype"] = "fp32";
    j["op"] = "sum";
    j["in_place"] = true;
    j["iters"] = o.iters;
    j["warmup"] = o.warmup;
    j["repeats"] = o.repeats;
    j["time_s"] = t;
    j["algbw_GBps"] = algbw;
    j["busbw_GBps"] = algbw * 2.0 * (world - 1) / world;
    if (o.check) j["correct"] = bad == 0;
    j["device"] = device_name;
    j["host"] = host;
    j["date"] = date;
    if (!system.empty()) j["system"] = system;
    if (nodes > 0) j["nodes"] = nodes;
    j["aiscale_version"] = AISCALE_VERSION;
    on_result(j);
  }
  // Said after the figures, and as a failure: a wrong sum makes them meaningless.
  if (wrong_sizes > 0)
    fail("the all-reduce gave wrong sums at {} of {} sizes (see \"correct\": false)", wrong_sizes,
         sizes.size());
}

}  // namespace aiscale::bench
