// The network of a ResNet config, layer by layer, built by both the CPU model (resnet.cpp)
// and the GPU plan (resnet_cuda_plan.cpp) so that their layers and parameters agree.
#pragma once
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "aiscale/nn/models/resnet_config.h"

namespace aiscale::nn {

// Builds the network of `c` into `b` and returns the logits' activation. B provides
// input, conv, bn(name, in, relu), maxpool, avgpool and fc(in, classes), and the end of a
// residual block: branch_end(bn, y) after the branch's last convolution y (bn names the
// branch's last batch norm), before the shortcut is built, and join(bn, y, shortcut),
// after it: the block's output, the sum of both after a ReLU.
template <typename B>
int build_resnet_network(B& b, const ResNetConfig& c) {
  int x = b.input(c.in_channels, c.image_size, c.image_size);
  if (c.imagenet_stem) {
    x = b.bn("bn1", b.conv("conv1", x, c.stem_channels, 7, 2, 3), true);
    x = b.maxpool(x, 3, 2, 1);
  } else {
    x = b.bn("bn1", b.conv("conv1", x, c.stem_channels, 3, c.stem_stride, 1), true);
  }
  int64_t channels = c.stem_channels;
  for (size_t stage = 0; stage < c.blocks.size(); ++stage) {
    const int64_t width = c.widths[stage], out_channels = width * c.expansion();
    for (int64_t block = 0; block < c.blocks[stage]; ++block) {
      const std::string p = fmt::format("layer{}.{}", stage + 1, block);
      const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      int y;
      std::string last;
      if (c.bottleneck) {
        y = b.bn(p + ".bn1", b.conv(p + ".conv1", x, width, 1, 1, 0), true);
        y = b.bn(p + ".bn2", b.conv(p + ".conv2", y, width, 3, stride, 1), true);
        y = b.conv(p + ".conv3", y, out_channels, 1, 1, 0);
        last = p + ".bn3";
      } else {
        y = b.bn(p + ".bn1", b.conv(p + ".conv1", x, width, 3, stride, 1), true);
        y = b.conv(p + ".conv2", y, width, 3, 1, 1);
        last = p + ".bn2";
      }
      y = b.branch_end(last, y);
      int shortcut = x;
      if (stride != 1 || channels != out_channels) {
        shortcut = b.bn(p + ".downsample.1",
                        b.conv(p + ".downsample.0", x, out_channels, 1, stride, 0), false);
      }
      x = b.join(last, y, shortcut);
      channels = out_channels;
    }
  }
  return b.fc(b.avgpool(x), c.num_classes);
}

}  // namespace aiscale::nn
