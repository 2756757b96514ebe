// ResNet architecture arithmetic for the planner: exact parameter count, multiply-adds
// per forward pass and an estimate of the activations kept for backward, found by
// walking the layers (torchvision's ResNet v1.5: stride on the 3x3 convolution).
#pragma once
#include <cstdint>

namespace aiscale::plan {

struct CnnCounts {
  int64_t params = 0;               // weights + biases + BatchNorm scale/shift
  double macs = 0;                  // multiply-adds of convolutions and the classifier, one image
  double activation_elements = 0;   // elements kept for backward, one image (estimate)
};

// depth: 18, 34 (basic blocks) or 50, 101, 152 (bottleneck blocks). Throws Error otherwise.
CnnCounts resnet_counts(int depth, int image_size = 224, int classes = 1000);

}  // namespace aiscale::plan
