// The memory checks of `aiscale bench machine`; see machine_memory.h. What each measurement
// allocates is read off its code: machine_cpu.cpp, machine_gpu.cu, allreduce.cpp.
#include "aiscale/bench/machine_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "aiscale/bench/machine.h"
#include "aiscale/core/error.h"

namespace aiscale::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;
constexpr double kCublasWorkspace = 32 * kMiB;  // cuda::Gemm::kWorkspaceBytes
constexpr double kDeviceReserve = kGiB;        // the CUDA context, cuBLASLt, the allocator

std::string bytes_text(double b) {
  return b >= kGiB ? fmt::format("{:.1f} GiB", b / kGiB) : fmt::format("{:.0f} MiB", b / kMiB);
}

// A number from the first line of a file; nothing for "max" or an unreadable file.
double first_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word)) return -1;
  try {
    size_t used = 0;
    const double v = std::stod(word, &used);
    return used == word.size() ? v : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

double meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      double kib = 0;
      if (fields >> kib) return kib * 1024.0;
    }
  return -1;
}

// What the process's memory cgroup still allows (v2, then v1); infinity without a limit.
double cgroup_room() {
  double limit = first_number("/sys/fs/cgroup/memory.max");
  double usage = first_number("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = first_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    usage = first_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  // v1 reports "no limit" as a number near 2^63.
  if (limit < 0 || limit > 1e18) return std::numeric_limits<double>::infinity();
  return std::max(0.0, limit - std::max(0.0, usage));
}

// The largest v in [1, hi] with need(v) <= budget (need grows with v); 0 when even 1 does
// not fit.
int64_t largest_fitting(int64_t hi, double budget, const std::function<double(int64_t)>& need) {
  if (need(1) > budget) return 0;
  int64_t lo = 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (need(mid) <= budget) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Fails when need(value) exceeds the budget, naming the option and its largest fitting value.
void check_one(const std::string& option, int64_t value, const std::string& what,
               const std::function<double(int64_t)>& need, double budget,
               const std::string& where) {
  const double bytes = need(value);
  if (bytes <= budget) return;
  const int64_t largest = largest_fitting(value, budget, need);
  fail("{} {}: {} needs {} of {} memory, more than the {} it can use here (what is available, "
       "less a reserve for the rest of the process); {}", option, value, what, bytes_text(bytes),
       where, bytes_text(budget),
       largest > 0 ? fmt::format("the largest {} that fits is {}", option, largest)
                   : fmt::format("even {} 1 does not fit: free memory or use a larger node", option));
}

// The bytes of a GEMM's three matrices.
double gemm_bytes(const GemmShape& g, double element) {
  return (double(g.m) * double(g.k) + double(g.k) * double(g.n) + double(g.m) * double(g.n)) *
         element;
}

}  // namespace

MachineMemory usable_memory(double device_total_bytes) {
  double available = meminfo_bytes("MemAvailable");
  if (available < 0) available = meminfo_bytes("MemTotal");
  if (available < 0) available = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  MachineMemory m;
  m.host_bytes = 0.9 * std::min(available, cgroup_room());
  m.device_bytes = std::max(0.0, device_total_bytes - kDeviceReserve);
  return m;
}

void check_sizes_fit(const MachineSizes& s, const MachineMemory& memory) {
  const double budget = s.gpu ? memory.device_bytes : memory.host_bytes;
  const std::string where = s.gpu ? "GPU" : "host";
  const double workspace = s.gpu ? kCublasWorkspace : 0.0;

  // The sweep's largest square GEMM: fp64 on CPUs, fp32 (and tf32) on GPUs.
  const double element = s.gpu ? 4.0 : 8.0;
  check_one("--max-size", s.max_size,
            fmt::format("the largest GEMM of the sweep ({}^3, three {} matrices)", s.max_size,
                        s.gpu ? "fp32" : "fp64"),
            [&](int64_t n) { return 3.0 * double(n) * double(n) * element + workspace; }, budget,
            where);

  // The model's GEMMs in fp32: the largest of them (the LM head's) decides.
  const int64_t vocab_multiple = s.gpu ? 128 : 1;
  auto model_bytes = [&](int64_t batch, int64_t seq) {
    double most = 0;
    for (const GemmShape& g : gpt_step_gemms(s.model, batch, seq, vocab_multiple))
      most = std::max(most, gemm_bytes(g, 4.0));
    return most + workspace;
  };
  const std::string model_what =
      fmt::format("the largest GEMM of {} on {} x {} tokens (fp32)", s.model, s.batch, s.seq);
  if (s.seq_named)
    check_one("--seq", s.seq, model_what, [&](int64_t q) { return model_bytes(s.batch, q); },
              budget, where);
  else
    check_one("--batch", s.batch, model_what, [&](int64_t b) { return model_bytes(b, s.seq); },
              budget, where);

  // Copy and triad over three arrays, on the host always and on the GPU too.
  const int64_t stream_mib = std::max<int64_t>(1, s.stream_bytes >> 20);
  auto stream = [](int64_t mib) { return 3.0 * double(mib) * kMiB; };
  check_one("--stream-mib", stream_mib, "the memory bandwidth test (three arrays)", stream,
            memory.host_bytes, "host");
  if (s.gpu)
    check_one("--stream-mib", stream_mib, "the device bandwidth test (three arrays)", stream,
              memory.device_bytes, "GPU");

  // The all-reduce: each rank holds the message and its host copy; the ranks of one host
  // share its memory.
  if (s.world > 1) {
    const double on_host = s.gpu ? 1.0 : 2.0;
    const std::string what =
        fmt::format("the all-reduce ({} rank(s) on this host, each holding the message {})",
                    s.ranks_per_host, s.gpu ? "on its GPU and a host copy" : "and a copy");
    check_one("--allreduce-bytes", s.allreduce_bytes, what,
              [&](int64_t b) { return on_host * double(s.ranks_per_host) * double(b); },
              memory.host_bytes, "host");
    if (s.gpu)
      check_one("--allreduce-bytes", s.allreduce_bytes, what,
                [&](int64_t b) { return double(b); }, memory.device_bytes, "GPU");
  }
}

}  // namespace aiscale::bench
