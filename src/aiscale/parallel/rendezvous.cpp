#include "aiscale/parallel/rendezvous.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/store.h"

namespace aiscale::parallel {
namespace {

constexpr const char* kMagic = "aiscale-rendezvous 1";

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool from_hex(const std::string& hex, std::string& out) {
  if (hex.size() % 2) return false;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out.clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = val(hex[i]), lo = val(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

struct Parsed {
  int world = 0;
  double time = 0;
  std::string blob;
};

bool parse(const std::string& text, Parsed& p) {
  std::istringstream in(text);
  std::string magic, key_world, key_time, key_blob, hex;
  std::getline(in, magic);
  if (magic != kMagic) return false;
  if (!(in >> key_world >> p.world >> key_time >> p.time >> key_blob >> hex)) return false;
  if (key_world != "world" || key_time != "time" || key_blob != "blob") return false;
  return from_hex(hex, p.blob);
}

}  // namespace

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// The path forms: a file store on the path's folder, the file name as key.
struct FileKey {
  std::string folder, key;
};
FileKey file_key(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  return {p.parent_path().empty() ? "." : p.parent_path().string(), p.filename().string()};
}

std::string describe(Store& store, const std::string& key, bool is_file, const std::string& path) {
  return is_file ? "rendezvous file '" + path + "'" : "rendezvous key '" + key + "' in the " + store.where();
}

void publish(Store& store, const std::string& key, std::string_view blob, int world) {
  store.set(key, fmt::format("{}\nworld {}\ntime {:.3f}\nblob {}\n", kMagic, world, wall_clock_s(),
                             to_hex(blob)));
}

std::string wait_for(Store& store, const std::string& key, int world, int rank,
                     const RendezvousWait& w, const std::string& what, const char* shared_hint) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double poll = w.poll_s;
  std::string seen_stale;
  for (;;) {
    if (auto text = store.try_get(key)) {
      Parsed p;
      if (!parse(*text, p))
        fail("{} is not an aiscale rendezvous file: point parallel.rendezvous at a path of its "
             "own (file:/shared/folder/job-name)", what);
      const bool stale = w.not_before > 0 && p.time < w.not_before - w.max_clock_skew_s;
      if (!stale) {
        if (p.world != world)
          fail("{} was written by a job of {} ranks, this one has {}: two jobs share the path; "
               "give each job its own (e.g. file:/shared/rdv-$SLURM_JOB_ID)", what, p.world, world);
        return p.blob;
      }
      seen_stale = fmt::format(" (a value from an earlier run is there, {:.0f} s old: rank 0 has "
                               "not replaced it)", wall_clock_s() - p.time);
    }
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited >= w.timeout_s)
      fail("rank {}: waited {:.0f} s for rank 0 to write the {}{}: check that rank 0 started, {}, "
           "and that all ranks were given the same parallel.rendezvous (raise parallel.timeout_s "
           "if rank 0 starts late)", rank, waited, what, seen_stale, shared_hint);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(poll, w.timeout_s - waited)));
    poll = std::min(poll * 2, 1.0);
  }
}

}  // namespace

void rendezvous_publish(Store& store, const std::string& key, std::string_view blob, int world) {
  publish(store, key, blob, world);
}

void rendezvous_publish(const std::string& path, std::string_view blob, int world) {
  namespace fs = std::filesystem;
  const FileKey fk = file_key(path);
  if (!fs::is_directory(fk.folder))
    fail("rendezvous file '{}': the folder '{}' does not exist: create it on a filesystem every "
         "node shares", path, fk.folder);
  auto store = make_file_store(fk.folder, 0);
  publish(*store, fk.key, blob, world);
}

std::string rendezvous_wait(Store& store, const std::string& key, int world, int rank,
                            const RendezvousWait& w) {
  return wait_for(store, key, world, rank, w, describe(store, key, false, ""),
                  "that this rank can reach the store");
}

std::string rendezvous_wait(const std::string& path, int world, int rank, const RendezvousWait& w) {
  const FileKey fk = file_key(path);
  auto store = make_file_store(fk.folder, w.timeout_s);
  return wait_for(*store, fk.key, world, rank, w, describe(*store, fk.key, true, path),
                  "that the path is on a filesystem every node shares");
}

}  // namespace aiscale::parallel
