#include "aiscale/bench/machine.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "aiscale/bench/allreduce.h"
#include "aiscale/bench/machine_cpu.h"
#include "aiscale/bench/machine_memory.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/split.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/train/sources.h"
#ifdef AISCALE_HAVE_CUDA
#include "aiscale/bench/machine_gpu.h"
#endif

namespace aiscale::bench {
namespace {

// The settings a run uses: the options, with the device's defaults where they are 0.
struct Settings {
  bool gpu = false;
  int64_t batch, seq, max_size, stream_bytes, allreduce_bytes;
  int repeats;
};

Settings settings_of(const MachineBenchOptions& o, bool gpu) {
  Settings s;
  s.gpu = gpu;
  auto pick = [&](int64_t v, int64_t cpu, int64_t cpu_quick, int64_t gpu_v, int64_t gpu_quick) {
    return v > 0 ? v : gpu ? (o.quick ? gpu_quick : gpu_v) : (o.quick ? cpu_quick : cpu);
  };
  s.batch = pick(o.batch, 1, 1, 16, 4);
  s.seq = pick(o.seq, 128, 32, 1024, 256);
  s.max_size = pick(o.max_size, 2048, 512, 8192, 2048);
  s.stream_bytes = pick(o.stream_mib, 32, 8, 256, 64) << 20;
  s.allreduce_bytes = pick(o.allreduce_bytes, 16 << 20, 1 << 20, 256 << 20, 32 << 20);
  s.repeats = static_cast<int>(o.repeats > 0 ? o.repeats : o.quick ? 2 : gpu ? 5 : 3);
  return s;
}

void progress(const std::string& line) {
  std::fprintf(stderr, "bench machine: %s\n", line.c_str());
  std::fflush(stderr);
}

// Square sizes of the sweep: 256 (CPU) or 1024 (GPU; --quick 512) doubling up to max_size.
std::vector<int64_t> sweep_sizes(const Settings& s) {
  std::vector<int64_t> out;
  for (int64_t n = s.gpu ? std::min<int64_t>(1024, s.max_size / 4) : std::min<int64_t>(256, s.max_size);
       n <= s.max_size; n *= 2)
    out.push_back(std::max<int64_t>(n, 16));
  if (out.empty() || out.back() != s.max_size) out.push_back(s.max_size);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double gemm_seconds(const Settings& s, const std::string& precision, const GemmShape& g) {
#ifdef AISCALE_HAVE_CUDA
  if (s.gpu) return gpu::gemm_seconds(precision, {g.m, g.n, g.k, g.trans_a, g.trans_b}, s.repeats);
#endif
  return cpu::gemm_seconds(precision, g, s.repeats);
}

// Distinct host names over the ranks: the node count.
int count_nodes(parallel::Communicator& comm) {
  const int world = comm.world();
  if (world < 2) return 1;
  // A 48-bit hash per rank, exact in a double.
  std::vector<double> h(static_cast<size_t>(world), 0.0);
  h[static_cast<size_t>(comm.rank())] = double(std::hash<std::string>{}(host_name()) & ((uint64_t{1} << 48) - 1));
  comm.allreduce_sum(h.data(), world);
  return static_cast<int>(std::set<double>(h.begin(), h.end()).size());
}

void measure_gemms(const Settings& s, const MachineBenchOptions& o, plan::MachineProfile& p,
                   const std::function<void(const nlohmann::json&)>& emit) {
  const std::vector<std::string> precisions =
      s.gpu ? std::vector<std::string>{"fp32", "tf32", "bf16", "fp16"}
            : std::vector<std::string>{"fp64", "fp32"};
  p.gemm_peak_size = s.max_size;
  for (const auto& prec : precisions)
    for (int64_t n : sweep_sizes(s)) {
      const GemmShape g{"square", n, n, n, false, false, 1};
      const double t = gemm_seconds(s, prec, g);
      if (!(t > 0)) continue;
      const double tflops = g.flops() / t / 1e12;
      p.gemm_peak_tflops[prec] = std::max(p.gemm_peak_tflops[prec], tflops);
      progress(fmt::format("GEMM {} {}^3: {:.4g} TFLOP/s", prec, n, tflops));
      emit({{"figure", "gemm"}, {"precision", prec}, {"m", n}, {"n", n}, {"k", n}, {"seconds", t},
            {"tflops", tflops}});
    }
  for (auto it = p.gemm_peak_tflops.begin(); it != p.gemm_peak_tflops.end();)
    it = it->second > 0 ? std::next(it) : p.gemm_peak_tflops.erase(it);

  // The model's own GEMMs: CPU runs train in fp32, so fp64 is left out there.
  const std::vector<GemmShape> shapes = gpt_step_gemms(o.model, s.batch, s.seq, s.gpu ? 128 : 1);
  p.shapes_model = o.model;
  p.shapes_batch = s.batch;
  p.shapes_seq = s.seq;
  for (const auto& prec : precisions) {
    if (prec == "fp64") continue;
    double flops = 0, seconds = 0;
    for (const auto& g : shapes) {
      const double t = gemm_seconds(s, prec, g);
      if (!(t > 0)) continue;
      const double tflops = g.flops() / t / 1e12;
      flops += g.flops() * double(g.count);
      seconds += t * double(g.count);
      p.shapes.push_back({g.name, prec, g.m, g.n, g.k, g.count, tflops});
      emit({{"figure", "gemm_model"}, {"model", o.model}, {"name", g.name}, {"precision", prec},
            {"m", g.m}, {"n", g.n}, {"k", g.k}, {"count", g.count}, {"seconds", t}, {"tflops", tflops}});
    }
    if (seconds > 0) {
      p.gemm_model_tflops[prec] = flops / seconds / 1e12;
      progress(fmt::format("GEMMs of {} ({} x {} tokens) {}: {:.4g} TFLOP/s", o.model, s.batch,
                           s.seq, prec, p.gemm_model_tflops[prec]));
      emit({{"figure", "gemm_model_step"}, {"model", o.model}, {"batch", s.batch}, {"seq", s.seq},
            {"precision", prec}, {"flops", flops}, {"seconds", seconds},
            {"tflops", p.gemm_model_tflops[prec]}});
    }
  }
}

void measure_bandwidths(const Settings& s, plan::MachineProfile& p,
                        const std::function<void(const nlohmann::json&)>& emit) {
  const cpu::HostBandwidth host = cpu::host_bandwidth(s.stream_bytes, s.repeats);
  p.host_copy_gbs = host.copy_gbs;
  p.host_triad_gbs = host.triad_gbs;
  progress(fmt::format("host memory: copy {:.1f} GB/s, triad {:.1f} GB/s ({} threads)",
                       host.copy_gbs, host.triad_gbs, p.threads));
  emit({{"figure", "host_memory"}, {"bytes_per_array", s.stream_bytes}, {"threads", p.threads},
        {"copy_gbs", host.copy_gbs}, {"triad_gbs", host.triad_gbs}});
#ifdef AISCALE_HAVE_CUDA
  if (!s.gpu) return;
  const gpu::DeviceBandwidth dev = gpu::device_bandwidth(s.stream_bytes, s.repeats);
  p.device_copy_gbs = dev.copy_gbs;
  p.device_triad_gbs = dev.triad_gbs;
  progress(fmt::format("device memory: copy {:.0f} GB/s, triad {:.0f} GB/s", dev.copy_gbs, dev.triad_gbs));
  emit({{"figure", "device_memory"}, {"bytes_per_array", s.stream_bytes},
        {"copy_gbs", dev.copy_gbs}, {"triad_gbs", dev.triad_gbs}});

  const gpu::Transfers x = gpu::host_device(s.stream_bytes, s.repeats);
  p.h2d_pinned_gbs = x.h2d_pinned;
  p.d2h_pinned_gbs = x.d2h_pinned;
  p.h2d_pageable_gbs = x.h2d_pageable;
  p.d2h_pageable_gbs = x.d2h_pageable;
  progress(fmt::format("host<->device: pinned {:.1f} / {:.1f} GB/s, pageable {:.1f} / {:.1f} GB/s "
                       "(to / from the GPU)", x.h2d_pinned, x.d2h_pinned, x.h2d_pageable, x.d2h_pageable));
  emit({{"figure", "host_device"}, {"bytes", s.stream_bytes}, {"h2d_pinned_gbs", x.h2d_pinned},
        {"d2h_pinned_gbs", x.d2h_pinned}, {"h2d_pageable_gbs", x.h2d_pageable},
        {"d2h_pageable_gbs", x.d2h_pageable}});

  bool all_peer = true;
  for (const gpu::Peer& e : gpu::peer_to_peer(s.stream_bytes, s.repeats)) {
    p.peers.push_back({e.src, e.dst, e.peer_access, e.gbs});
    all_peer = all_peer && e.peer_access;
    progress(fmt::format("GPU {} -> GPU {}: {:.1f} GB/s{}", e.src, e.dst, e.gbs,
                         e.peer_access ? " (peer access)" : " (no peer access)"));
    emit({{"figure", "p2p"}, {"src", e.src}, {"dst", e.dst}, {"bytes", s.stream_bytes},
          {"peer_access", e.peer_access}, {"gbs", e.gbs}});
  }
  p.p2p_enabled = !p.peers.empty() && all_peer;
#else
  (void)emit;
#endif
}

}  // namespace

std::vector<GemmShape> gpt_step_gemms(const std::string& model, int64_t batch, int64_t seq,
                                      int64_t vocab_multiple) {
  const nn::GptConfig g = nn::gpt_preset(model);
  if (batch < 1 || seq < 1) fail("--batch and --seq must be at least 1 (got {} and {})", batch, seq);
  if (seq > g.block_size)
    fail("--seq {} exceeds {}'s context of {} tokens: lower --seq", seq, model, g.block_size);
  const int64_t N = batch * seq, C = g.n_embd;
  const int64_t m = std::max<int64_t>(1, vocab_multiple);
  const int64_t V = (g.vocab_size + m - 1) / m * m;
  struct Linear {
    const char* name;
    int64_t in, out, count;
  };
  const Linear layers[] = {{"qkv", C, 3 * C, g.n_layer},
                           {"attn_proj", C, C, g.n_layer},
                           {"fc", C, 4 * C, g.n_layer},
                           {"fc_proj", 4 * C, C, g.n_layer},
                           {"lm_head", C, V, 1}};
  std::vector<GemmShape> out;
  for (const Linear& l : layers) {
    const std::string n = l.name;
    // As the CPU backend's linear layer calls them (ops/cpu/matmul.cpp): out = in · Wᵀ,
    // d_in = d_out · W, d_W = d_outᵀ · in; W is stored (out, in).
    out.push_back({n + ".fwd", N, l.out, l.in, false, true, l.count});
    out.push_back({n + ".dinp", N, l.in, l.out, false, false, l.count});
    out.push_back({n + ".dweight", l.out, l.in, N, true, false, l.count});
  }
  return out;
}

std::string machine_bench_device(const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("--device '{}' is not known: use auto, cpu or cuda", device);
  if (device == "cpu") return "cpu";
#ifdef AISCALE_HAVE_CUDA
  const bool visible = parallel::cuda_visible_gpus() > 0;
#else
  const bool visible = false;
#endif
  if (device == "cuda" && !visible)
    fail("--device cuda: {}; use --device cpu",
#ifdef AISCALE_HAVE_CUDA
         "no GPU is visible"
#else
         "this aiscale was built without CUDA (rebuild with the cuda preset)"
#endif
    );
  return visible ? "cuda" : "cpu";
}

std::string this_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (std::string_view arg : split(all, '\0')) {
    std::string word(arg);
    if (word.find_first_of(" \t\"'") != std::string::npos) word = "'" + word + "'";
    out += (out.empty() ? "" : " ") + word;
  }
  return out.empty() ? "aiscale bench machine" : out;
}

plan::MachineProfile run_machine_bench(const MachineBenchOptions& o, parallel::Communicator& comm,
                                       const std::function<void(const nlohmann::json&)>& on_result) {
  const bool gpu = machine_bench_device(o.device) == "cuda";
  const Settings s = settings_of(o, gpu);
  gpt_step_gemms(o.model, s.batch, s.seq);  // a bad model or shape fails before any work
  if (comm.world() > 1 && gpu != comm.on_device())
    fail("bench machine on {} ranks measures the all-reduce of its device: the communicator is "
         "{} but the device is {}; use --device {}", comm.world(), comm.backend(),
         gpu ? "cuda" : "cpu", comm.on_device() ? "cuda" : "cpu");
  const bool lead = comm.rank() == 0;
  auto emit = [&](nlohmann::json j) {
    if (!lead) return;
    nlohmann::json rec = {{"benchmark", "machine"}};
    rec.update(j);
    on_result(rec);
  };

  plan::MachineProfile p;
  p.host = host_name();
  p.date = utc_iso8601();
  p.aiscale_version = AISCALE_VERSION;
  p.command = o.command.empty() ? this_command_line() : o.command;
  p.device_kind = gpu ? "gpu" : "cpu";
  p.cpu = cpu_model_name();
  p.cpu_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.threads = train::set_cpu_threads(o.threads);
  p.ranks = comm.world();
  p.nodes = count_nodes(comm);
#ifdef AISCALE_HAVE_CUDA
  if (gpu) {
    const gpu::Identity id = gpu::identity();
    p.gpu = id.name;
    p.gpu_count = id.count;
    p.gpu_memory_gib = id.memory_gib;
    p.driver = id.driver;
  }
#endif
  // Every size against the memory, on every rank alike, before the first measurement.
  MachineSizes sizes;
  sizes.gpu = gpu;
  sizes.model = o.model;
  sizes.batch = s.batch;
  sizes.seq = s.seq;
  sizes.seq_named = o.seq > 0 && o.batch == 0;
  sizes.max_size = s.max_size;
  sizes.stream_bytes = s.stream_bytes;
  sizes.allreduce_bytes = s.allreduce_bytes;
  sizes.world = comm.world();
  sizes.ranks_per_host = (comm.world() + p.nodes - 1) / std::max(1, p.nodes);
  check_sizes_fit(sizes, usable_memory(p.gpu_memory_gib * 1024.0 * 1024.0 * 1024.0));
  if (lead) {
    progress(fmt::format("{} on {} ({}){}", p.device() , p.host, gpu ? "GPU" : fmt::format("{} threads", p.threads),
                         comm.world() > 1 ? fmt::format(", {} ranks: rank 0 measures the node, then "
                                                        "all ranks the all-reduce", comm.world())
                                          : std::string()));
    emit({{"figure", "identity"}, {"host", p.host}, {"date", p.date}, {"device_kind", p.device_kind},
          {"device", p.device()}, {"cpu", p.cpu}, {"cpu_cores", p.cpu_cores}, {"threads", p.threads},
          {"gpu_count", p.gpu_count}, {"driver", p.driver}, {"ranks", p.ranks}, {"nodes", p.nodes},
          {"aiscale_version", p.aiscale_version}, {"command", p.command}});
    measure_gemms(s, o, p, emit);
    measure_bandwidths(s, p, emit);
  }
  comm.barrier();

  if (comm.world() > 1) {
    AllreduceBenchOptions ao;
    ao.backend = comm.on_device() ? "nccl" : comm.backend() == "tcp" ? "tcp" : "mpi";
    ao.min_bytes = ao.max_bytes = std::max<int64_t>(4, s.allreduce_bytes / 4 * 4);
    ao.iters = o.quick ? 5 : 20;
    ao.warmup = o.quick ? 1 : 5;
    ao.repeats = s.repeats;
    ao.nodes = p.nodes;
    run_allreduce_bench(ao, comm, [&](const nlohmann::json& j) {
      p.allreduce_backend = ao.backend;
      p.allreduce_ranks = comm.world();
      p.allreduce_bytes = j.at("bytes").get<double>();
      p.allreduce_busbw_gbs = j.at("busbw_GBps").get<double>();
      progress(fmt::format("all-reduce ({}, {} ranks, {:.0f} MiB): bus bandwidth {:.2f} GB/s",
                           ao.backend, comm.world(), p.allreduce_bytes / 1048576.0,
                           p.allreduce_busbw_gbs));
      emit({{"figure", "allreduce"}, {"backend", ao.backend}, {"ranks", comm.world()},
            {"bytes", j.at("bytes")}, {"busbw_gbs", p.allreduce_busbw_gbs},
            {"correct", j.value("correct", true)}});
    });
  }
  return p;
}

}  // namespace aiscale::bench
