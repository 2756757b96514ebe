#include "aiscale/plan/resnet.h"

#include "aiscale/core/error.h"

namespace aiscale::plan {
namespace {

struct Walker {
  CnnCounts c;
  int64_t h = 0;  // current spatial size (square)

  static int64_t out_size(int64_t in, int k, int stride, int pad) {
    return (in + 2 * pad - k) / stride + 1;
  }
  // conv (no bias) + BatchNorm (+ ReLU). Keeps the conv output and the BN/ReLU output
  // (ReLU runs in place) for backward: two tensors of the output's size.
  void conv_bn(int64_t cin, int64_t cout, int k, int stride, int64_t& size) {
    int64_t out = out_size(size, k, stride, k / 2);
    c.params += cin * cout * k * k + 2 * cout;
    c.macs += static_cast<double>(cin * cout * k * k) * out * out;
    c.activation_elements += 2.0 * cout * out * out;
    size = out;
  }
};

}  // namespace

CnnCounts resnet_counts(int depth, int image_size, int classes) {
  int blocks[4];
  bool bottleneck = true;
  switch (depth) {
    case 18: blocks[0] = 2; blocks[1] = 2; blocks[2] = 2; blocks[3] = 2; bottleneck = false; break;
    case 34: blocks[0] = 3; blocks[1] = 4; blocks[2] = 6; blocks[3] = 3; bottleneck = false; break;
    case 50: blocks[0] = 3; blocks[1] = 4; blocks[2] = 6; blocks[3] = 3; break;
    case 101: blocks[0] = 3; blocks[1] = 4; blocks[2] = 23; blocks[3] = 3; break;
    case 152: blocks[0] = 3; blocks[1] = 8; blocks[2] = 36; blocks[3] = 3; break;
    default: fail("ResNet depth {} is not supported: use 18, 34, 50, 101 or 152", depth);
  }
  if (image_size < 32) fail("image size {} is too small for a ResNet: use at least 32", image_size);
  Walker w;
  int64_t size = image_size;
  w.c.activation_elements += 3.0 * size * size;  // the input image
  w.conv_bn(3, 64, 7, 2, size);                   // stem
  size = Walker::out_size(size, 3, 2, 1);          // max pool
  w.c.activation_elements += 64.0 * size * size;
  const int expansion = bottleneck ? 4 : 1;
  int64_t in_ch = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      const int64_t out_ch = width * expansion;
      int64_t s = size, skip = size;
      if (bottleneck) {
        w.conv_bn(in_ch, width, 1, 1, s);
        w.conv_bn(width, width, 3, stride, s);
        w.conv_bn(width, out_ch, 1, 1, s);
      } else {
        w.conv_bn(in_ch, width, 3, stride, s);
        w.conv_bn(width, width, 3, 1, s);
      }
      if (stride != 1 || in_ch != out_ch) w.conv_bn(in_ch, out_ch, 1, stride, skip);
      w.c.activation_elements += static_cast<double>(out_ch) * s * s;  // residual sum
      in_ch = out_ch;
      size = s;
    }
  }
  // Global average pool, then the classifier (with bias).
  w.c.activation_elements += static_cast<double>(in_ch);
  w.c.params += in_ch * classes + classes;
  w.c.macs += static_cast<double>(in_ch) * classes;
  return w.c;
}

}  // namespace aiscale::plan
