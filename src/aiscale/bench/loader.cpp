// The loader benchmark; see loader.h.
#include "aiscale/bench/loader.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/rng.h"
#include "aiscale/data/images/codec.h"
#include "aiscale/data/images/lmdb_source.h"
#include "aiscale/data/images/pack_images.h"

namespace aiscale::bench {
namespace fs = std::filesystem;
namespace {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// A photo-like test image: smooth colour fields with edges and mild noise, so its JPEG
// has a photo's size and decoding cost (pure noise would be far larger and slower, flat
// colour far smaller and faster).
std::vector<uint8_t> synthetic_photo(int64_t w, int64_t h, uint64_t seed) {
  Rng rng(seed);
  const float fx = 0.5f + 3.0f * rng.uniform(), fy = 0.5f + 3.0f * rng.uniform();
  const float base[3] = {255 * rng.uniform(), 255 * rng.uniform(), 255 * rng.uniform()};
  const int64_t edge_x = static_cast<int64_t>(rng.below(static_cast<uint64_t>(w)));
  std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int k = 0; k < 3; ++k) {
        const float wave = 60.0f * std::sin(fx * 6.283f * x / w + k) * std::cos(fy * 6.283f * y / h);
        const float step = x > edge_x ? 40.0f : -40.0f;
        const float noise = 24.0f * (rng.uniform() - 0.5f);
        const float v = base[k] * 0.5f + 64.0f + wave + step + noise;
        px[(y * w + x) * 3 + k] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
  return px;
}

// Writes the synthetic set as an ImageFolder tree and packs it with the real packer.
std::string pack_synthetic(const LoaderBenchOptions& o, const fs::path& dir) {
  const fs::path folder = dir / "images";
  for (int64_t c = 0; c < o.classes; ++c) fs::create_directories(folder / fmt::format("class{:03}", c));
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < o.synthetic; ++i) {
    const std::vector<uint8_t> px = synthetic_photo(o.synthetic_width, o.synthetic_height, o.seed * 1000003 + i);
    const std::vector<uint8_t> jpeg = data::encode_jpeg(px.data(), o.synthetic_width, o.synthetic_height, 3);
    std::ofstream(folder / fmt::format("class{:03}", i % o.classes) / fmt::format("img{:07}.jpg", i),
                  std::ios::binary)
        .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
  }
  data::PackImagesOptions pack;
  pack.folder = folder.string();
  pack.output = (dir / "store").string();
  data::pack_images(pack);
  fs::remove_all(folder);
  return pack.output;
}

}  // namespace

std::vector<int> default_thread_sweep(int cores) {
  std::vector<int> sweep;
  for (int t = 1; t < cores; t *= 2) sweep.push_back(t);
  sweep.push_back(cores);
  return sweep;
}

std::vector<nlohmann::json> run_loader_bench(const LoaderBenchOptions& o,
                                             const std::function<void(const nlohmann::json&)>& emit) {
  if (o.batch_size < 1 || o.batches < 1 || o.warmup < 0 || o.crop < 1)
    fail("bench loader: batch size, batches and crop must be positive, warm-up not negative");
  const bool synthetic = o.data.empty();
  if (synthetic && (o.synthetic < 1 || o.synthetic_width < 8 || o.synthetic_height < 8 || o.classes < 1))
    fail("bench loader: --synthetic needs at least one image of at least 8x8 and one class");
  fs::path temp;
  std::string store = o.data;
  if (synthetic) {
    const fs::path base = o.workdir.empty() ? fs::temp_directory_path() : fs::path(o.workdir);
    temp = base / fmt::format("aiscale-bench-loader-{}", ::getpid());
    fs::remove_all(temp);
    fs::create_directories(temp);
  }
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup{temp};
  double pack_seconds = 0;
  if (synthetic) {
    const auto start = std::chrono::steady_clock::now();
    store = pack_synthetic(o, temp);
    pack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const int cores = usable_cores();
  const std::vector<int> sweep = o.threads.empty() ? default_thread_sweep(cores) : o.threads;
  std::vector<nlohmann::json> records;
  for (int threads : sweep) {
    if (threads < 1) fail("bench loader: thread counts must be positive (got {})", threads);
    data::ImageSourceConfig c;
    c.path = store;
    c.batch_size = o.batch_size;
    c.seed = o.seed;
    c.train = o.train;
    c.height = c.width = o.crop;
    c.threads = threads;
    c.stage = o.stage;
    c.roi_decode = o.roi_decode;
    c.skip_corrupt = o.skip_corrupt;
    c.skip_corrupt_option = "--skip-corrupt";
    c.repeat = 1;
    if (o.layout == "nhwc") c.layout = data::ImageLayout::nhwc;
    else if (o.layout != "nchw") fail("bench loader: layout '{}': use nchw or nhwc", o.layout);
    // Enough positions for warm-up and timing without the epoch running out.
    const data::ImageStoreMeta meta = data::open_record_reader(store, false)->meta();
    c.repeat = std::max<int64_t>(1, ((o.warmup + o.batches + 1) * o.batch_size + meta.records - 1) / meta.records);
    data::LmdbImageSource source(c);
    data::ImageBatchView view;
    for (int64_t k = 0; k < o.warmup; ++k) source.next_batch_view(view);
    const data::ImageSourceStats before = source.stats();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < o.batches; ++k) source.next_batch_view(view);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const data::ImageSourceStats after = source.stats();
    const double images = static_cast<double>(o.batches * o.batch_size);
    nlohmann::json j;
    j["benchmark"] = "loader";
    j["data"] = synthetic ? "synthetic" : o.data;
    if (synthetic) {
      j["synthetic_images"] = o.synthetic;
      j["synthetic_size"] = {{"width", o.synthetic_width}, {"height", o.synthetic_height}};
      j["synthetic_pack_s"] = pack_seconds;
    }
    j["records"] = meta.records;
    j["stored_channels"] = meta.channels;
    if (meta.height > 0) j["stored_size"] = {{"width", meta.width}, {"height", meta.height}};
    else j["stored_size"] = "mixed";
    j["train"] = o.train;
    j["augment"] = o.train ? "random-resized-crop+flip" : "centre-crop";
    j["served"] = {{"channels", source.channels()}, {"height", source.height()}, {"width", source.width()}};
    j["layout"] = o.layout;
    j["stage"] = o.stage;
    j["roi_decode"] = o.roi_decode;
    j["batch"] = o.batch_size;
    j["threads"] = threads;
    j["batches_timed"] = o.batches;
    j["seconds"] = seconds;
    j["images_per_s"] = images / seconds;
    j["images_per_s_per_thread"] = images / seconds / threads;
    // Worker time per image includes decoding at the stage counted; the consumer's
    // waiting share shows whether the workers kept ahead.
    j["worker_ms_per_image"] = 1e3 * (after.decode_seconds - before.decode_seconds) /
                               std::max(1.0, static_cast<double>(after.images - before.images));
    j["skipped_corrupt"] = after.skipped_corrupt;
    if (o.gpu_images_per_s > 0) {
      j["gpu_images_per_s"] = o.gpu_images_per_s;
      j["ratio_to_gpu"] = images / seconds / o.gpu_images_per_s;
    }
    j["cores"] = cores;
    j["cpu"] = cpu_model_name();
    j["host"] = host_name();
    j["date"] = utc_iso8601();
    j["aiscale_version"] = AISCALE_VERSION;
    if (emit) emit(j);
    records.push_back(std::move(j));
  }
  return records;
}

}  // namespace aiscale::bench
