// The loader benchmark: images/s that the host's cores decode, augment and normalise
// through the image source (data/images), over a sweep of worker-thread counts, from a
// packed store or from a synthetic JPEG set packed into a temporary folder.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::bench {

struct LoaderBenchOptions {
  std::string data;                 // a store from `aiscale data pack-images`; empty: synthetic
  int64_t synthetic = 1000;         // synthetic: this many JPEG images ...
  int64_t synthetic_width = 500;    // ... of this size (ImageNet's photos average ~500x375)
  int64_t synthetic_height = 375;
  int64_t classes = 10;             // synthetic: classes the images are spread over
  std::string workdir;              // synthetic: where the temporary store goes ("": $TMPDIR)
  int64_t crop = 224;               // served height and width
  int64_t batch_size = 128;         // images per batch
  std::vector<int> threads;         // the sweep; empty: 1, 2, 4, ... and all usable cores
  int64_t batches = 20;             // timed batches per thread count
  int64_t warmup = 3;               // untimed batches first
  bool train = true;                // random-resized-crop + flip; false: centre crop
  std::string stage = "none";       // as ImageSourceConfig::stage
  std::string layout = "nchw";
  bool roi_decode = true;           // JPEG: decode only the crop's region (false: whole image)
  bool skip_corrupt = false;        // a corrupt record: false an error, true skipped and counted
  uint64_t seed = 1;
  double gpu_images_per_s = 0;      // when > 0: each record compares with this consumer
};

// The thread counts a sweep uses (1, 2, 4, ... and `cores`).
std::vector<int> default_thread_sweep(int cores);

// Runs the sweep; calls `emit` with one JSON record per thread count (fields in
// docs/guide/images.md#bench-loader) and returns them.
std::vector<nlohmann::json> run_loader_bench(const LoaderBenchOptions& o,
                                             const std::function<void(const nlohmann::json&)>& emit);

}  // namespace aiscale::bench
