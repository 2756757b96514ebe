// IDX image sets (Fashion-MNIST) as a Dataset: the files are read by the image stores'
// IDX reader (data/images/idx.h: plain or gzip'd, errors naming the file); here the pixels
// become features in [0, 1], optionally averaged over k x k blocks.
#include <algorithm>

#include "aiscale/core/error.h"
#include "aiscale/data/images/idx.h"
#include "aiscale/tune/dataset.h"

namespace aiscale::tune {

Dataset read_idx(const std::string& images_path, const std::string& labels_path, int64_t pool) {
  const data::ImageArray images = data::read_idx_image_set(images_path, labels_path);
  const int64_t n = images.count, h = images.height, w = images.width, ch = images.channels;
  if (n == 0 || h == 0 || w == 0)
    fail("IDX image file '{}' holds {} images of {}x{}: it has no pixels", images_path, n, h, w);
  const int64_t k = pool;
  if (k < 1 || h % k != 0 || w % k != 0)
    fail("data.image_pool = {} does not divide the {}x{} images of '{}': use a divisor of both sides "
         "(1 keeps every pixel)", pool, h, w, images_path);
  const int64_t ph = h / k, pw = w / k;
  Dataset d;
  d.source = k == 1 ? images_path : images_path + " (" + std::to_string(k) + "x" + std::to_string(k) + " pooled)";
  d.kind = TaskKind::classification;
  d.rows = n;
  d.features = ph * pw * ch;
  d.target = "label";
  d.x.assign(static_cast<size_t>(n * d.features), 0.0f);
  const float scale = 1.0f / (255.0f * static_cast<float>(k * k));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* img = images.pixels.data() + i * h * w * ch;  // (H, W, C)
    float* out = d.x.data() + i * d.features;                    // (H/k, W/k, C)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t c = 0; c < w; ++c)
        for (int64_t z = 0; z < ch; ++z)
          out[((r / k) * pw + c / k) * ch + z] += img[(r * w + c) * ch + z] * scale;
  }
  d.y.resize(static_cast<size_t>(n));
  int32_t max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    d.y[i] = static_cast<float>(images.labels[i]);
    max_label = std::max(max_label, images.labels[i]);
  }
  d.classes = max_label + 1;
  for (int64_t c = 0; c < d.classes; ++c) d.class_names.push_back(std::to_string(c));
  for (int64_t i = 0; i < d.features; ++i) d.feature_names.push_back("pixel" + std::to_string(i));
  return d;
}

}  // namespace aiscale::tune
