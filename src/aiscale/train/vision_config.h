// The configuration of a vision run (`aiscale train` with [model] kind = "resnet"): the same
// TOML file + `--set section.key=value` overrides as a GPT run, validated against its own
// schema (the keys of an image classifier trained with SGD), so an unknown key or a bad value
// fails with a message naming it, the value and what is allowed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/core/config_key_info.h"

namespace aiscale::train {

struct VisionTrainConfig {
  // [model]
  std::string kind = "resnet";
  std::string preset = "resnet-small";  // resnet18 | resnet34 | resnet50 | resnet-small
  int64_t num_classes = 0;   // 0: the data's
  int64_t image_size = 0;    // 0: the data's (the size images are served at)
  int64_t blocks_per_stage = 0;  // 0: the preset's
  int64_t stem_stride = 0;       // resnet-small's 3x3 stem: 1 or 2; 0: the preset's (1)
  double label_smoothing = 0.0;
  bool zero_init_residual = false;

  // [data]
  std::string data_kind = "lmdb";  // lmdb (aiscale data pack-images) | idx | synthetic
  std::string train_data;          // LMDB directory, or IDX images file
  std::string val_data;            // optional
  int64_t repeat = 1;              // each record k times per epoch
  int64_t loader_threads = 0;      // decoding workers per rank; 0: the rank's cores
  std::string stage = "none";      // none | ram | local:DIR
  std::string augment = "crop-flip";  // training images: crop-flip | flip | none
  bool skip_corrupt = false;       // a corrupt record: false stops with an error naming it,
                                   // true skips it (counted in summary.json)
  int64_t synthetic_images = 4096; // synthetic: images in the set
  int64_t synthetic_channels = 3;
  int64_t synthetic_classes = 10;

  // [train]
  std::string device = "cpu";       // cpu | cuda (one GPU per rank)
  std::string precision = "fp32";   // cuda: fp32 | bf16 | fp16 (AMP)
  bool tf32 = false;                // cuda fp32: TF32 convolutions
  std::string batchnorm = "auto";   // cuda: auto | own | cudnn (batch norm kernels)
  int64_t cudnn_workspace_mib = -1;  // cuda: cuDNN's workspace in MiB, -1 automatic
  int64_t batch_size = 32;   // per rank
  int64_t steps = 0;         // optimizer steps; 0: train.epochs of the training set
  double epochs = 1.0;
  uint64_t seed = 1337;
  double lr = 0.1;           // for a global batch of train.reference_batch
  std::string lr_scaling = "linear";  // linear: lr x global_batch / reference_batch | none
  int64_t reference_batch = 256;
  double warmup_epochs = 0.0;
  std::string schedule = "cosine";  // cosine | step | constant
  double step_epochs = 30.0;        // step: decay every this many epochs
  double step_gamma = 0.1;
  double min_lr_ratio = 0.0;        // cosine: final lr as a fraction of the peak
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 1e-4;
  bool decay_bn_and_bias = false;
  int64_t threads = 0;
  int64_t eval_every = 0;      // steps between validation passes; 0: at the end of each epoch
  int64_t eval_batches = 0;    // 0: the whole validation set
  int64_t log_every = 10;

  // [parallel]
  std::string communicator = "auto";  // auto | mpi | none
  bool sync_batchnorm = false;
  bool overlap_allreduce = true;      // GPU ranks: bucketed all-reduce during the backward
  int64_t zero_stage = 0;             // CPU ranks: 0 DDP, 1 ZeRO-1 (momentum sharded)
  double timeout_s = 300;

  // [run]
  std::string run_dir = "runs";
  std::string run_name;
  int64_t checkpoint_every = 0;  // steps; 0: only at the end
  int64_t keep_checkpoints = 2;
};

// Whether a config (TOML text plus overrides) describes a vision run: [model] kind = "resnet"
// or a ResNet model.preset. Malformed TOML answers false (the GPT parser reports it).
bool is_vision_config(const std::string& toml_text, const std::vector<std::string>& overrides);

VisionTrainConfig parse_vision_config(const std::string& toml_text, const std::string& source,
                                      const std::vector<std::string>& overrides);
VisionTrainConfig load_vision_config(const std::string& path,
                                     const std::vector<std::string>& overrides);
std::string to_toml(const VisionTrainConfig& c);
std::string vision_config_reference();
// Every key of the vision schema, in its order (docs/reference/config.md lists them).
std::vector<config::KeyInfo> vision_config_keys();

}  // namespace aiscale::train
