// The GPU ResNet's plan: its layers, activations and parameter layout, worked out on the
// host from the CPU model (nn::ResNet, whose parameter table and initial values it shares)
// and handed to the device model (resnet_cuda.cu) as plain data.
//
// What differs from the CPU model's layer list:
//  - a block's last batch norm takes the shortcut as its residual input z and applies the
//    add and the ReLU in the same pass (y = relu(bn(x) + z)), so there is no add layer;
//  - the device parameter layout puts every tensor the convolutions and the classifier
//    read (converted to 16 bits under AMP) first — the convolution weights as OHWI
//    (cuDNN's NHWC filters), then fc.weight and fc.bias — and the batch norm scales and
//    shifts (always fp32) after them; the decayed tensors (convolution and classifier
//    weights) form the prefix [0, decay_end); a zero gap after fc.bias (< 64 values)
//    starts the batch norms' region on a 256-byte boundary. `params` maps each tensor
//    between the host layout (torchvision's order, OIHW) and this one;
//  - activation gradients live in a few shared slots, reused once a gradient is consumed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/parallel/data_parallel/gradient_segments.h"

namespace aiscale::nn {

class ResNet;

struct ResNetCudaAct {
  int64_t C = 0, H = 0, W = 0;
  int grad_slot = -1;  // -1: no gradient (the input images)
  int64_t per_image() const { return C * H * W; }
};

enum class ResNetCudaLayerKind : uint8_t { conv, bn, maxpool, avgpool, fc };

struct ResNetCudaLayer {
  ResNetCudaLayerKind kind = ResNetCudaLayerKind::conv;
  std::string name;         // the parameter prefix ("layer1.0.conv1"), or the op
  int in = -1, out = -1;
  int z = -1;               // bn: the residual added before the ReLU (-1: none)
  bool relu = false;        // bn
  bool acc_in = false;      // backward adds into in's gradient (another reader wrote it)
  bool acc_z = false;       // the same for z
  // conv: the input geometry and the convolution; pool: window; bn / avgpool: C, H, W.
  int64_t C = 0, H = 0, W = 0, OC = 0, K = 1, stride = 1, pad = 0;
  int64_t weight = -1, bias = -1;     // device offsets (conv, fc)
  int64_t gamma = -1, beta = -1;      // device offsets (bn)
  int64_t running_mean = -1, running_var = -1;  // offsets into the buffers (host layout)
  int bn_index = -1;        // bn: its slot of saved statistics
  int pool_index = -1;      // maxpool: its argmax buffer
};

// One tensor's place in both layouts. A convolution weight (OC, C, K, K) on the host is
// (OC, K, K, C) on the device; everything else keeps its shape.
struct ResNetCudaParam {
  std::string name;
  int64_t host_offset = 0, device_offset = 0, size = 0;
  bool conv = false;
  int64_t OC = 0, C = 0, K = 0;
};

struct ResNetCudaPlan {
  std::vector<ResNetCudaAct> acts;       // acts[0]: the input images
  std::vector<ResNetCudaLayer> layers;   // in forward order
  std::vector<ResNetCudaParam> params;
  int logits = -1;
  int64_t num_params = 0, num_buffers = 0;  // device layout values (num_params >= host_params)
  int64_t host_params = 0;  // the host model's parameters; the rest is an alignment gap
  int64_t weight_end = 0;   // [0, weight_end): convolution and classifier tensors, the gap
  int64_t decay_end = 0;    // [0, decay_end): the tensors weight decay applies to
  int grad_slots = 0;
  int64_t max_batch = 0, num_classes = 0, in_channels = 0, image_size = 0;
  int bn_layers = 0, pool_layers = 0;
};

// The order in which the backward completes the device gradient buffer, for the
// data-parallel reducer outside the model (parallel/data_parallel/gradient_segments.h).
// Each region ([0, weight_end): convolutions and classifier; [weight_end, num_params):
// batch norms) completes from its top down, as ready suffixes: a segment is the range the
// suffix grew by once layer `point` (forward numbering) has run its backward, cut when it
// holds at least `min_values` values or at layer 0. The segments of the weights' region
// come first, then the batch norms' — each region's in completion order, neighbours in
// memory, so the reducer's buckets merge them. Under ZeRO-1 a cut rounds up (the values
// join the next, later bucket) except at weight_end, which rounds down: the values below
// it (the classifier's, complete first) join the batch norms' last bucket.
// The model also adds its 16-bit weight gradients into fp32 per segment (AMP).
parallel::dp::GradientOrder resnet_gradient_order(const ResNetCudaPlan& plan, int64_t min_values);

// The plan of `host`'s configuration for batches up to max_batch; decay_bn_and_bias puts
// every tensor under weight decay (decay_end = num_params).
ResNetCudaPlan build_resnet_cuda_plan(const ResNet& host, int64_t max_batch,
                                      bool decay_bn_and_bias);

// Host layout (host_params values) <-> device layout (num_params values, the gap zero) of
// the parameters, gradients or momentum buffers.
std::vector<float> to_device_layout(const ResNetCudaPlan& plan, const std::vector<float>& host);
void to_host_layout(const ResNetCudaPlan& plan, const std::vector<float>& device,
                    std::vector<float>& host);

}  // namespace aiscale::nn
