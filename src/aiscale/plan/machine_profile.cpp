#include "aiscale/plan/machine_profile.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::plan {
namespace {

constexpr const char* kFormat = "aiscale-machine-profile";
constexpr int64_t kVersion = 1;
const char* const kPrecisions[] = {"fp64", "fp32", "tf32", "bf16", "fp16"};

// TOML basic string: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04X}", unsigned(c));
    else out += char(c);
  }
  return out + "\"";
}

// A figure with enough digits to read back as written (never in exponent-free TOML
// trouble: fmt's shortest round-trip form is a valid TOML float or integer-looking float).
std::string number(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// Reads one table's keys with the checks every key shares: known, of the right type,
// present when required, figures positive.
class Reader {
 public:
  Reader(const std::string& file, const toml::table& t, std::string prefix, std::set<std::string> known)
      : file_(file), t_(t), prefix_(std::move(prefix)), known_(std::move(known)) {
    for (const auto& [key, node] : t_) {
      const std::string k(key.str());
      if (!known_.count(k)) {
        std::string list;
        for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
        fail("machine profile '{}': unknown key '{}{}' (line {}): the keys of {} are {}; was the "
             "file written by `aiscale bench machine`?", file_, prefix_, k,
             node.source().begin.line, prefix_.empty() ? "the top level" : "[" + prefix_.substr(0, prefix_.size() - 1) + "]",
             list);
      }
    }
  }

  const toml::node* node(const char* key, bool required) const {
    const toml::node* n = t_.get(key);
    if (!n && required)
      fail("machine profile '{}': missing key '{}{}': re-run `aiscale bench machine` to write a "
           "complete profile", file_, prefix_, key);
    return n;
  }
  std::string text(const char* key, bool required = true) const {
    const toml::node* n = node(key, required);
    if (!n) return "";
    if (!n->is_string()) fail("machine profile '{}': '{}{}' (line {}) must be a string", file_, prefix_, key, n->source().begin.line);
    return n->as_string()->get();
  }
  bool flag(const char* key, bool required = true) const {
    const toml::node* n = node(key, required);
    if (!n) return false;
    if (!n->is_boolean()) fail("machine profile '{}': '{}{}' (line {}) must be true or false", file_, prefix_, key, n->source().begin.line);
    return n->as_boolean()->get();
  }
  // A positive number (integer or float); 0 when absent and not required.
  double figure(const char* key, bool required = true) const {
    const toml::node* n = node(key, required);
    if (!n) return 0;
    double v = 0;
    if (n->is_integer()) v = double(n->as_integer()->get());
    else if (n->is_floating_point()) v = n->as_floating_point()->get();
    else fail("machine profile '{}': '{}{}' (line {}) must be a number", file_, prefix_, key, n->source().begin.line);
    if (!(v > 0))
      fail("machine profile '{}': '{}{}' = {} (line {}) must be positive: a measured figure is "
           "never zero or negative; re-run `aiscale bench machine`", file_, prefix_, key, v,
           n->source().begin.line);
    return v;
  }
  int64_t count(const char* key, bool required = true) const {
    const double v = figure(key, required);
    if (v != double(int64_t(v)))
      fail("machine profile '{}': '{}{}' must be a whole number (got {})", file_, prefix_, key, v);
    return int64_t(v);
  }
  const toml::table* table(const char* key, bool required) const {
    const toml::node* n = node(key, required);
    if (!n) return nullptr;
    if (!n->is_table()) fail("machine profile '{}': '{}{}' (line {}) must be a table", file_, prefix_, key, n->source().begin.line);
    return n->as_table();
  }
  // An array of tables ([[key]]); empty when absent.
  std::vector<const toml::table*> tables(const char* key) const {
    std::vector<const toml::table*> out;
    const toml::node* n = node(key, false);
    if (!n) return out;
    if (!n->is_array_of_tables())
      fail("machine profile '{}': '{}{}' (line {}) must be an array of tables ([[{}{}]])", file_,
           prefix_, key, n->source().begin.line, prefix_, key);
    for (const auto& e : *n->as_array()) out.push_back(e.as_table());
    return out;
  }
  std::string where(const char* key) const { return prefix_ + key + "."; }

 private:
  const std::string& file_;
  const toml::table& t_;
  std::string prefix_;
  std::set<std::string> known_;
};

std::set<std::string> precision_keys(std::set<std::string> extra = {}) {
  for (const char* p : kPrecisions) extra.insert(p);
  return extra;
}

void read_precisions(const Reader& r, std::map<std::string, double>& out) {
  for (const char* p : kPrecisions)
    if (const double v = r.figure(p, false); v > 0) out[p] = v;
}

}  // namespace

double MachineProfile::p2p_min_gbs() const {
  double m = 0;
  for (const auto& e : peers) m = (m == 0) ? e.gbs : std::min(m, e.gbs);
  return m;
}

std::string MachineProfile::label() const {
  return fmt::format("machine profile {} ({}, {})", file.empty() ? "(unsaved)" : file, host, date);
}

std::string machine_profile_toml(const MachineProfile& p) {
  std::string o;
  o += "# Written by `aiscale bench machine`; the format is docs/guide/machine-profile.md.\n";
  o += fmt::format("format = {}\nversion = {}\n\n", quoted(kFormat), kVersion);
  o += "[machine]\n";
  o += fmt::format("host = {}\ndate = {}\naiscale_version = {}\ncommand = {}\ndevice_kind = {}\n",
                   quoted(p.host), quoted(p.date), quoted(p.aiscale_version), quoted(p.command),
                   quoted(p.device_kind));
  o += fmt::format("cpu = {}\ncpu_cores = {}\nthreads = {}\n", quoted(p.cpu), p.cpu_cores, p.threads);
  if (p.is_gpu())
    o += fmt::format("gpu = {}\ngpu_count = {}\ngpu_memory_gib = {}\ndriver = {}\n", quoted(p.gpu),
                     p.gpu_count, number(p.gpu_memory_gib), quoted(p.driver));
  o += fmt::format("ranks = {}\nnodes = {}\n\n", p.ranks, p.nodes);

  o += "[gemm_peak_tflops]  # dense GEMM, best of the square-size sweep, TFLOP/s\n";
  for (const auto& [prec, v] : p.gemm_peak_tflops) o += fmt::format("{} = {}\n", prec, number(v));
  if (p.gemm_peak_size > 0) o += fmt::format("largest_size = {}\n", p.gemm_peak_size);
  o += "\n";

  if (!p.gemm_model_tflops.empty()) {
    o += "[gemm_model]  # the model's own GEMMs of one training step, FLOP-weighted TFLOP/s\n";
    o += fmt::format("model = {}\nbatch = {}\nseq = {}\n", quoted(p.shapes_model), p.shapes_batch,
                     p.shapes_seq);
    for (const auto& [prec, v] : p.gemm_model_tflops) o += fmt::format("{} = {}\n", prec, number(v));
    for (const auto& s : p.shapes)
      o += fmt::format("\n[[gemm_model.shape]]\nname = {}\nprecision = {}\nm = {}\nn = {}\nk = {}\n"
                       "count = {}\ntflops = {}\n", quoted(s.name), quoted(s.precision), s.m, s.n,
                       s.k, s.count, number(s.tflops));
    o += "\n";
  }

  o += "[memory_gbs]  # STREAM-like copy (2 x bytes) and triad (3 x bytes), GB/s\n";
  o += fmt::format("host_copy = {}\nhost_triad = {}\n", number(p.host_copy_gbs), number(p.host_triad_gbs));
  if (p.device_copy_gbs > 0) o += fmt::format("device_copy = {}\n", number(p.device_copy_gbs));
  if (p.device_triad_gbs > 0) o += fmt::format("device_triad = {}\n", number(p.device_triad_gbs));
  o += "\n";

  if (p.h2d_pinned_gbs > 0) {
    o += "[transfer_gbs]  # host<->device cudaMemcpy, GB/s\n";
    o += fmt::format("h2d_pinned = {}\nd2h_pinned = {}\nh2d_pageable = {}\nd2h_pageable = {}\n\n",
                     number(p.h2d_pinned_gbs), number(p.d2h_pinned_gbs),
                     number(p.h2d_pageable_gbs), number(p.d2h_pageable_gbs));
  }
  if (!p.peers.empty()) {
    o += "[p2p]  # cudaMemcpyPeer between every ordered pair of GPUs, GB/s one direction\n";
    o += fmt::format("enabled = {}\nmin_gbs = {}\n", p.p2p_enabled, number(p.p2p_min_gbs()));
    for (const auto& e : p.peers)
      o += fmt::format("\n[[p2p.pair]]\nsrc = {}\ndst = {}\npeer_access = {}\ngbs = {}\n", e.src,
                       e.dst, e.peer_access, number(e.gbs));
    o += "\n";
  }
  if (p.allreduce_ranks > 1) {
    o += "[allreduce]  # in-place fp32 sum, bus bandwidth = algbw * 2(n-1)/n, GB/s\n";
    o += fmt::format("backend = {}\nranks = {}\nbytes = {}\nbusbw_gbs = {}\n",
                     quoted(p.allreduce_backend), p.allreduce_ranks, int64_t(p.allreduce_bytes),
                     number(p.allreduce_busbw_gbs));
  }
  return o;
}

void write_machine_profile(const std::string& path, const MachineProfile& p) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    fail("cannot write the machine profile '{}': folder '{}' does not exist; create it or choose "
         "another --output", path, parent.string());
  atomic_write_file(path, machine_profile_toml(p));
}

MachineProfile load_machine_profile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("machine profile '{}' does not exist: give the file `aiscale bench machine --output FILE` "
         "wrote on the machine to plan for", path);
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("machine profile '{}' is not valid TOML (line {}: {}): re-run `aiscale bench machine "
         "--output {}`", path, e.source().begin.line, e.description(), path);
  }
  MachineProfile p;
  p.file = path;
  const Reader top(path, root, "", {"format", "version", "machine", "gemm_peak_tflops", "gemm_model",
                                    "memory_gbs", "transfer_gbs", "p2p", "allreduce"});
  if (top.text("format") != kFormat)
    fail("machine profile '{}': format is '{}', not '{}': is this a profile written by `aiscale "
         "bench machine`?", path, top.text("format"), kFormat);
  if (top.count("version") != kVersion)
    fail("machine profile '{}': version {} is not one this aiscale reads ({}): re-run `aiscale "
         "bench machine`", path, top.count("version"), kVersion);

  const Reader m(path, *top.table("machine", true), "machine.",
                 {"host", "date", "aiscale_version", "command", "device_kind", "cpu", "cpu_cores",
                  "threads", "gpu", "gpu_count", "gpu_memory_gib", "driver", "ranks", "nodes"});
  p.host = m.text("host");
  p.date = m.text("date");
  p.aiscale_version = m.text("aiscale_version");
  p.command = m.text("command");
  p.device_kind = m.text("device_kind");
  if (p.device_kind != "gpu" && p.device_kind != "cpu")
    fail("machine profile '{}': machine.device_kind must be \"gpu\" or \"cpu\" (got '{}')", path,
         p.device_kind);
  p.cpu = m.text("cpu");
  p.cpu_cores = int(m.count("cpu_cores"));
  p.threads = int(m.count("threads"));
  p.gpu = m.text("gpu", p.is_gpu());
  p.gpu_count = int(m.count("gpu_count", p.is_gpu()));
  p.gpu_memory_gib = m.figure("gpu_memory_gib", p.is_gpu());
  p.driver = m.text("driver", p.is_gpu());
  p.ranks = int(m.count("ranks"));
  p.nodes = int(m.count("nodes"));

  const Reader g(path, *top.table("gemm_peak_tflops", true), "gemm_peak_tflops.",
                 precision_keys({"largest_size"}));
  read_precisions(g, p.gemm_peak_tflops);
  p.gemm_peak_size = g.count("largest_size", false);
  if (p.gemm_peak_tflops.empty())
    fail("machine profile '{}': [gemm_peak_tflops] holds no precision (fp64, fp32, tf32, bf16 or "
         "fp16): re-run `aiscale bench machine`", path);

  if (const toml::table* t = top.table("gemm_model", false)) {
    const Reader r(path, *t, "gemm_model.", precision_keys({"model", "batch", "seq", "shape"}));
    p.shapes_model = r.text("model");
    p.shapes_batch = r.count("batch");
    p.shapes_seq = r.count("seq");
    read_precisions(r, p.gemm_model_tflops);
    for (const toml::table* s : r.tables("shape")) {
      const Reader sr(path, *s, "gemm_model.shape.", {"name", "precision", "m", "n", "k", "count", "tflops"});
      p.shapes.push_back({sr.text("name"), sr.text("precision"), sr.count("m"), sr.count("n"),
                          sr.count("k"), sr.count("count"), sr.figure("tflops")});
    }
  }

  const Reader mem(path, *top.table("memory_gbs", true), "memory_gbs.",
                   {"host_copy", "host_triad", "device_copy", "device_triad"});
  p.host_copy_gbs = mem.figure("host_copy");
  p.host_triad_gbs = mem.figure("host_triad");
  p.device_copy_gbs = mem.figure("device_copy", p.is_gpu());
  p.device_triad_gbs = mem.figure("device_triad", p.is_gpu());

  if (const toml::table* t = top.table("transfer_gbs", false)) {
    const Reader r(path, *t, "transfer_gbs.", {"h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"});
    p.h2d_pinned_gbs = r.figure("h2d_pinned");
    p.d2h_pinned_gbs = r.figure("d2h_pinned");
    p.h2d_pageable_gbs = r.figure("h2d_pageable");
    p.d2h_pageable_gbs = r.figure("d2h_pageable");
  }
  if (const toml::table* t = top.table("p2p", false)) {
    const Reader r(path, *t, "p2p.", {"enabled", "min_gbs", "pair"});
    p.p2p_enabled = r.flag("enabled");
    r.figure("min_gbs");
    for (const toml::table* e : r.tables("pair")) {
      const Reader er(path, *e, "p2p.pair.", {"src", "dst", "peer_access", "gbs"});
      const toml::node* src = e->get("src");
      const toml::node* dst = e->get("dst");
      if (!src || !src->is_integer() || !dst || !dst->is_integer())
        fail("machine profile '{}': every [[p2p.pair]] needs integer 'src' and 'dst' GPU indices", path);
      p.peers.push_back({int(src->as_integer()->get()), int(dst->as_integer()->get()),
                         er.flag("peer_access"), er.figure("gbs")});
    }
    if (p.peers.empty())
      fail("machine profile '{}': [p2p] lists no [[p2p.pair]]: re-run `aiscale bench machine`", path);
  }
  if (const toml::table* t = top.table("allreduce", false)) {
    const Reader r(path, *t, "allreduce.", {"backend", "ranks", "bytes", "busbw_gbs"});
    p.allreduce_backend = r.text("backend");
    p.allreduce_ranks = int(r.count("ranks"));
    p.allreduce_bytes = r.figure("bytes");
    p.allreduce_busbw_gbs = r.figure("busbw_gbs");
  }
  return p;
}

}  // namespace aiscale::plan
