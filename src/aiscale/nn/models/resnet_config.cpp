#include "aiscale/nn/models/resnet_config.h"

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::nn {

std::vector<std::string> resnet_preset_names() {
  return {"resnet18", "resnet34", "resnet50", "resnet-small"};
}

ResNetConfig resnet_preset(const std::string& name) {
  ResNetConfig c;
  c.name = name;
  if (name == "resnet-small") return c;
  c.imagenet_stem = true;
  c.stem_channels = 64;
  c.widths = {64, 128, 256, 512};
  c.in_channels = 3;
  c.image_size = 224;
  c.num_classes = 1000;
  if (name == "resnet18") {
    c.blocks = {2, 2, 2, 2};
  } else if (name == "resnet34") {
    c.blocks = {3, 4, 6, 3};
  } else if (name == "resnet50") {
    c.blocks = {3, 4, 6, 3};
    c.bottleneck = true;
  } else {
    fail("unknown ResNet preset '{}': choose one of {}", name,
         fmt::join(resnet_preset_names(), ", "));
  }
  return c;
}

void validate(const ResNetConfig& c) {
  if (c.blocks.empty() || c.blocks.size() != c.widths.size()) {
    fail("ResNet '{}': blocks ({}) and widths ({}) need one entry per stage", c.name,
         c.blocks.size(), c.widths.size());
  }
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    if (c.blocks[i] < 1 || c.widths[i] < 1) {
      fail("ResNet '{}': stage {} needs at least one block and one channel", c.name, i + 1);
    }
  }
  if (c.in_channels < 1 || c.num_classes < 2 || c.stem_channels < 1) {
    fail("ResNet '{}': in_channels {} and num_classes {} must be >= 1 and >= 2", c.name,
         c.in_channels, c.num_classes);
  }
  // Each stage after the first halves the size, the ImageNet stem divides it by 4.
  int64_t size = c.image_size;
  if (c.imagenet_stem) size = ((size + 2 * 3 - 7) / 2 + 1 + 2 - 3) / 2 + 1;
  else size = (size + 2 - 3) / c.stem_stride + 1;
  if (c.stem_stride < 1 || c.stem_stride > 2)
    fail("ResNet '{}': stem stride {} must be 1 or 2", c.name, c.stem_stride);
  for (size_t i = 1; i < c.blocks.size(); ++i) size = (size + 2 - 3) / 2 + 1;
  if (c.image_size < 1 || size < 1) {
    fail("ResNet '{}': images of {}x{} are too small for its stem and {} stages", c.name,
         c.image_size, c.image_size, c.blocks.size());
  }
}

}  // namespace aiscale::nn
