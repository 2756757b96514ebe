// ResNet shapes: the published ResNet-18/34/50 (He et al. 2015, torchvision's layout: an
// ImageNet stem of a 7x7 stride-2 convolution and a 3x3 stride-2 max pool, four stages,
// the stride on the first block's 3x3 convolution) and a small ResNet for CPU tests on
// 28x28 gray images (a 3x3 stem, no pool, three stages of 16/32/64 channels).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::nn {

struct ResNetConfig {
  std::string name = "resnet-small";
  bool bottleneck = false;        // false: basic blocks (two 3x3), true: 1x1-3x3-1x1, x4 wide
  bool imagenet_stem = false;     // 7x7/2 conv + 3x3/2 max pool; false: one 3x3 conv
  int64_t stem_stride = 1;        // the 3x3 stem's stride (2 quarters the work of stage 1)
  int64_t stem_channels = 16;
  std::vector<int64_t> blocks{2, 2, 2};      // per stage
  std::vector<int64_t> widths{16, 32, 64};   // per stage (bottleneck: the inner width)
  int64_t in_channels = 1;
  int64_t image_size = 28;        // square inputs
  int64_t num_classes = 10;

  int64_t expansion() const { return bottleneck ? 4 : 1; }
  int64_t features() const { return widths.back() * expansion(); }  // into the classifier
};

// "resnet18", "resnet34", "resnet50" (3x224x224, 1000 classes) and "resnet-small"
// (1x28x28, 10 classes). Throws Error naming the choices for anything else.
ResNetConfig resnet_preset(const std::string& name);
std::vector<std::string> resnet_preset_names();
// Throws Error naming the field when the shape cannot be built (e.g. an image too small
// for the stem and strides).
void validate(const ResNetConfig& c);

}  // namespace aiscale::nn
