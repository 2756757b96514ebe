#include "aiscale/profile/gpu_power.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>

#include "aiscale/core/error.h"

namespace aiscale::profile {

namespace {
// The few NVML entry points used, with NVML's C signatures (nvml.h is not needed: NVML's
// ABI is stable, and the versioned names are the ones the library exports).
using Ret = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
using Device = void*;
constexpr int kClockSm = 1;  // NVML_CLOCK_SM

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct GpuPowerMeter::Nvml {
  void* lib = nullptr;
  Ret (*init)() = nullptr;
  Ret (*by_pci)(const char*, Device*) = nullptr;
  Ret (*energy)(Device, unsigned long long*) = nullptr;  // mJ since the driver loaded
  Ret (*limit)(Device, unsigned*) = nullptr;             // mW
  Ret (*clock)(Device, int, unsigned*) = nullptr;        // MHz
  // nvmlUtilization_t: percent of the last sample period with a kernel running, and with
  // device memory being read or written. Optional (null when the driver lacks it).
  struct Utilization {
    unsigned gpu, memory;
  };
  Ret (*utilization)(Device, Utilization*) = nullptr;
  const char* (*error)(Ret) = nullptr;
  // For read_node_gpus and describe_gpu (optional: null when the driver lacks them).
  struct Memory {
    unsigned long long total, free, used;
  };
  Ret (*count)(unsigned*) = nullptr;
  Ret (*by_index)(unsigned, Device*) = nullptr;
  Ret (*name)(Device, char*, unsigned) = nullptr;
  Ret (*uuid)(Device, char*, unsigned) = nullptr;
  Ret (*memory)(Device, Memory*) = nullptr;
  Ret (*power)(Device, unsigned*) = nullptr;  // mW
  Ret (*driver_version)(char*, unsigned) = nullptr;
  Ret (*cuda_driver_version)(int*) = nullptr;
  std::string why;  // why NVML cannot be used ("" when it can)

  std::string text(Ret r) const {
    return error ? std::string(error(r)) : "NVML error " + std::to_string(r);
  }

  // Opened and initialised once per process, never closed (other threads may still ask).
  static std::shared_ptr<Nvml> get() {
    static std::mutex mu;
    static std::shared_ptr<Nvml> instance;
    std::lock_guard<std::mutex> lock(mu);
    if (instance) return instance;
    auto n = std::make_shared<Nvml>();
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
      n->why = "libnvidia-ml.so.1 (NVML, part of the NVIDIA driver) could not be opened";
    } else {
      auto sym = [&](const char* name) { return dlsym(n->lib, name); };
      n->init = reinterpret_cast<Ret (*)()>(sym("nvmlInit_v2"));
      n->by_pci = reinterpret_cast<Ret (*)(const char*, Device*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
      n->energy = reinterpret_cast<Ret (*)(Device, unsigned long long*)>(sym("nvmlDeviceGetTotalEnergyConsumption"));
      n->limit = reinterpret_cast<Ret (*)(Device, unsigned*)>(sym("nvmlDeviceGetEnforcedPowerLimit"));
      n->clock = reinterpret_cast<Ret (*)(Device, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
      n->error = reinterpret_cast<const char* (*)(Ret)>(sym("nvmlErrorString"));
      n->utilization = reinterpret_cast<Ret (*)(Device, Utilization*)>(sym("nvmlDeviceGetUtilizationRates"));
      n->count = reinterpret_cast<Ret (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
      n->by_index = reinterpret_cast<Ret (*)(unsigned, Device*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
      n->name = reinterpret_cast<Ret (*)(Device, char*, unsigned)>(sym("nvmlDeviceGetName"));
      n->uuid = reinterpret_cast<Ret (*)(Device, char*, unsigned)>(sym("nvmlDeviceGetUUID"));
      n->memory = reinterpret_cast<Ret (*)(Device, Memory*)>(sym("nvmlDeviceGetMemoryInfo"));
      n->power = reinterpret_cast<Ret (*)(Device, unsigned*)>(sym("nvmlDeviceGetPowerUsage"));
      n->driver_version = reinterpret_cast<Ret (*)(char*, unsigned)>(sym("nvmlSystemGetDriverVersion"));
      n->cuda_driver_version = reinterpret_cast<Ret (*)(int*)>(sym("nvmlSystemGetCudaDriverVersion_v2"));
      if (!n->init || !n->by_pci || !n->energy || !n->limit || !n->clock) {
        n->why = "the NVML library lacks an entry point aiscale needs (driver too old?)";
      } else if (const Ret r = n->init(); r != 0) {
        n->why = "NVML did not initialise: " + n->text(r);
      }
    }
    instance = n;
    return instance;
  }
};

GpuPowerMeter::GpuPowerMeter(const std::string& pci_bus_id) : nvml_(Nvml::get()) {
  if (!nvml_->why.empty()) {
    why_ = nvml_->why;
    return;
  }
  if (pci_bus_id.empty()) {
    why_ = "no GPU PCI bus id (not a CUDA run)";
    return;
  }
  Device d = nullptr;
  if (const Ret r = nvml_->by_pci(pci_bus_id.c_str(), &d); r != 0) {
    why_ = "NVML does not know the GPU at PCI bus id " + pci_bus_id + ": " + nvml_->text(r);
    return;
  }
  unsigned long long e = 0;
  if (const Ret r = nvml_->energy(d, &e); r != 0) {
    why_ = "NVML gives no energy counter for the GPU at " + pci_bus_id + ": " + nvml_->text(r);
    return;
  }
  device_ = d;
}

GpuPowerMeter::~GpuPowerMeter() {
  stop_ = true;
  if (sampler_.joinable()) sampler_.join();
}

void GpuPowerMeter::sample_loop() {
  while (!stop_) {
    unsigned mhz = 0;
    if (nvml_->clock(device_, kClockSm, &mhz) == 0 && mhz > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      const double c = mhz;
      clock_min_ = clock_n_ == 0 ? c : std::min(clock_min_, c);
      clock_max_ = clock_n_ == 0 ? c : std::max(clock_max_, c);
      clock_sum_ += c;
      ++clock_n_;
    }
    Nvml::Utilization u{};
    if (nvml_->utilization && nvml_->utilization(device_, &u) == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      util_sum_ += u.gpu;
      ++util_n_;
    }
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void GpuPowerMeter::start() {
  if (!available()) return;
  if (sampler_.joinable()) fail("GpuPowerMeter::start: a window is already open");
  {
    std::lock_guard<std::mutex> lock(mu_);
    clock_sum_ = clock_min_ = clock_max_ = 0;
    clock_n_ = 0;
    util_sum_ = 0;
    util_n_ = 0;
  }
  if (nvml_->energy(device_, &energy0_mj_) != 0) energy0_mj_ = 0;
  t0_ = now_s();
  stop_ = false;
  sampler_ = std::thread([this] { sample_loop(); });
}

GpuPowerWindow GpuPowerMeter::stop() {
  GpuPowerWindow w;
  if (!available()) return w;
  if (!sampler_.joinable()) fail("GpuPowerMeter::stop without start");
  unsigned long long e1 = 0;
  const Ret er = nvml_->energy(device_, &e1);
  w.seconds = now_s() - t0_;
  stop_ = true;
  sampler_.join();
  if (er == 0 && e1 >= energy0_mj_) w.energy_j = double(e1 - energy0_mj_) * 1e-3;
  if (w.seconds > 0) w.mean_power_w = w.energy_j / w.seconds;
  unsigned mw = 0;
  if (nvml_->limit(device_, &mw) == 0) w.power_limit_w = mw * 1e-3;
  std::lock_guard<std::mutex> lock(mu_);
  w.clock_samples = clock_n_;
  if (clock_n_ > 0) {
    w.mean_sm_clock_mhz = clock_sum_ / clock_n_;
    w.min_sm_clock_mhz = clock_min_;
    w.max_sm_clock_mhz = clock_max_;
  }
  w.utilization_samples = util_n_;
  if (util_n_ > 0) w.mean_gpu_utilization_pct = util_sum_ / util_n_;
  return w;
}

std::vector<std::pair<std::string, double>> gpu_power_event_fields(const GpuPowerWindow& w, bool measured) {
  return {{"measured", measured ? 1.0 : 0.0},
          {"seconds", w.seconds},
          {"energy_j", w.energy_j},
          {"mean_power_w", w.mean_power_w},
          {"power_limit_w", w.power_limit_w},
          {"mean_sm_clock_mhz", w.mean_sm_clock_mhz},
          {"min_sm_clock_mhz", w.min_sm_clock_mhz},
          {"max_sm_clock_mhz", w.max_sm_clock_mhz},
          {"mean_gpu_utilization_pct", w.mean_gpu_utilization_pct}};
}

namespace {
NodeGpu read_gpu(const GpuPowerMeter::Nvml& n, Device d, int index) {
  NodeGpu g;
  g.index = index;
  char text[96] = {};
  if (n.name && n.name(d, text, sizeof text) == 0) g.name = text;
  if (n.uuid && n.uuid(d, text, sizeof text) == 0) g.uuid = text;
  GpuPowerMeter::Nvml::Utilization u{};
  if (n.utilization && n.utilization(d, &u) == 0) g.utilization_pct = u.gpu;
  GpuPowerMeter::Nvml::Memory m{};
  if (n.memory && n.memory(d, &m) == 0) {
    g.memory_used_bytes = double(m.used);
    g.memory_total_bytes = double(m.total);
  }
  unsigned mw = 0;
  if (n.power && n.power(d, &mw) == 0) g.power_w = mw * 1e-3;
  return g;
}
}  // namespace

std::vector<NodeGpu> read_node_gpus(std::string* why) {
  const auto n = GpuPowerMeter::Nvml::get();
  std::vector<NodeGpu> out;
  unsigned count = 0;
  if (!n->why.empty() || !n->count || !n->by_index || n->count(&count) != 0) {
    if (why) *why = n->why.empty() ? "NVML cannot list the GPUs" : n->why;
    return out;
  }
  for (unsigned i = 0; i < count; ++i) {
    Device d = nullptr;
    if (n->by_index(i, &d) == 0) out.push_back(read_gpu(*n, d, int(i)));
  }
  return out;
}

NodeGpu describe_gpu(const std::string& pci_bus_id) {
  const auto n = GpuPowerMeter::Nvml::get();
  Device d = nullptr;
  if (!n->why.empty() || pci_bus_id.empty() || n->by_pci(pci_bus_id.c_str(), &d) != 0) return {};
  return read_gpu(*n, d, -1);
}

std::string nvml_driver_version() {
  const auto n = GpuPowerMeter::Nvml::get();
  char text[96] = {};
  if (!n->why.empty() || !n->driver_version || n->driver_version(text, sizeof text) != 0) return {};
  return text;
}

int nvml_cuda_driver_version() {
  const auto n = GpuPowerMeter::Nvml::get();
  int v = 0;
  if (!n->why.empty() || !n->cuda_driver_version || n->cuda_driver_version(&v) != 0) return 0;
  return v;
}

}  // namespace aiscale::profile
