#include "aiscale/train/vision_config.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/toml_errors.h"
#include "aiscale/core/validate.h"
#include "aiscale/nn/models/resnet_config.h"
#include "aiscale/core/config_schema.h"
#include "aiscale/train/config_common_keys.h"

namespace aiscale::train {
namespace {

using Config = VisionTrainConfig;
using Key = config::Key<Config>;

using config::bool_key;
using config::int_key;
using config::real_key;
using config::string_key;

constexpr int64_t kBig = int64_t{1} << 40;

std::vector<Key> keys() {
  {  // one block: the keys in the order the reference lists them
    std::vector<Key> k;
    k.push_back(string_key("model.kind", &Config::kind, "resnet: an image classifier", {"resnet"}));
    k.push_back(string_key("model.preset", &Config::preset,
                           "resnet18, resnet34, resnet50 (ImageNet stem) or resnet-small "
                           "(3x3 stem, 16/32/64 channels, for 28x28 images)",
                           nn::resnet_preset_names()));
    k.push_back(int_key("model.num_classes", &Config::num_classes,
                        "classifier outputs; 0 = the training data's classes", 0, 1 << 24));
    k.push_back(int_key("model.image_size", &Config::image_size,
                        "square size images are served at; 0 = the stored size", 0, 1 << 16));
    k.push_back(int_key("model.blocks_per_stage", &Config::blocks_per_stage,
                        "residual blocks in every stage; 0 = the preset's", 0, 64));
    k.push_back(int_key("model.stem_stride", &Config::stem_stride,
                        "resnet-small: stride of the 3x3 stem (2 quarters stage 1's work); "
                        "0 = the preset's 1", 0, 2));
    k.push_back(real_key("model.label_smoothing", &Config::label_smoothing,
                         "cross-entropy against (1 - e) onehot + e / classes", 0.0, 0.999));
    k.push_back(bool_key("model.zero_init_residual", &Config::zero_init_residual,
                         "start each block's last batch norm scale at 0"));
    k.push_back(string_key("data.kind", &Config::data_kind,
                           "lmdb (written by aiscale data pack-images), idx (MNIST-style "
                           "files) or synthetic (generated images, for benchmarks and tests)",
                           {"lmdb", "idx", "synthetic"}));
    k.push_back(string_key("data.train", &Config::train_data,
                           "training images: the LMDB directory, or the IDX images file (its "
                           "labels file beside it)"));
    k.push_back(string_key("data.val", &Config::val_data,
                           "validation images (same kind); empty = no validation"));
    k.push_back(int_key("data.repeat", &Config::repeat,
                        "read each record this many times per epoch", 1, 1 << 20));
    k.push_back(int_key("data.loader_threads", &Config::loader_threads,
                        "decoding workers per rank; 0 = the rank's cores", 0, 4096));
    k.push_back(string_key("data.stage", &Config::stage,
                           "none, ram (copy the store into memory first) or local:DIR"));
    k.push_back(string_key("data.augment", &Config::augment,
                           "training images: crop-flip (random-resized-crop + horizontal "
                           "flip), flip (resize + flip) or none (resize)",
                           {"crop-flip", "flip", "none"}));
    k.push_back(bool_key("data.skip_corrupt", &Config::skip_corrupt,
                         "false: a record of the image store that cannot be decoded stops the "
                         "run with an error naming it; true: it is skipped (the batch takes the "
                         "next record), with one warning and the count in summary.json"));
    k.push_back(int_key("data.synthetic_images", &Config::synthetic_images,
                        "synthetic: images in the set", 1, kBig));
    k.push_back(int_key("data.synthetic_channels", &Config::synthetic_channels,
                        "synthetic: channels per image", 1, 64));
    k.push_back(int_key("data.synthetic_classes", &Config::synthetic_classes,
                        "synthetic: classes", 2, 1 << 20));
    k.push_back(string_key("train.device", &Config::device,
                           "where to train: cpu, or cuda (one GPU per rank: NHWC, cuDNN)",
                           {"cpu", "cuda"}));
    k.push_back(string_key("train.precision", &Config::precision,
                           "cuda: fp32, or bf16 / fp16 AMP (16-bit activations, fp32 master "
                           "weights and batch norm); the CPU trains in fp32",
                           {"fp32", "bf16", "fp16"}));
    k.push_back(bool_key("train.tf32", &Config::tf32,
                         "cuda fp32: let cuDNN use TF32 tensor cores (off: true fp32)"));
    k.push_back(string_key("train.batchnorm", &Config::batchnorm,
                           "cuda: batch norm kernels, auto (cudnn for bf16 and fp16, own for "
                           "fp32: the faster measured), own (deterministic) or cudnn (cuDNN's "
                           "fused kernels where cuDNN takes the layer; bf16 and fp16 only, fp32 "
                           "keeps the own)",
                           {"auto", "own", "cudnn"}));
    k.push_back(int_key("train.cudnn_workspace_mib", &Config::cudnn_workspace_mib,
                        "cuda: MiB of cuDNN workspace, allocated once; the convolution search "
                        "only times engines that fit it; -1: the GPU's free memory beside the "
                        "model, less 2 GiB, within 512 MiB..16 GiB", -1, int64_t{1} << 20));
    k.push_back(int_key("train.batch_size", &Config::batch_size, "images per rank per step", 1,
                        1 << 20));
    k.push_back(int_key("train.steps", &Config::steps,
                        "optimizer steps; 0 = train.epochs of the training set", 0, kBig));
    k.push_back(real_key("train.epochs", &Config::epochs, "epochs when train.steps = 0", 0.0,
                         1e6));
    add_common_train_keys(k);  // train.seed, train.threads, train.log_every
    k.push_back(real_key("train.lr", &Config::lr,
                         "base learning rate, for a global batch of train.reference_batch",
                         0.0, 1e3));
    k.push_back(string_key("train.lr_scaling", &Config::lr_scaling,
                           "linear: peak lr = train.lr x global batch / train.reference_batch "
                           "(Goyal et al.); none: train.lr as given",
                           {"linear", "none"}));
    k.push_back(int_key("train.reference_batch", &Config::reference_batch,
                        "the batch train.lr was tuned for", 1, 1 << 30));
    k.push_back(real_key("train.warmup_epochs", &Config::warmup_epochs,
                         "linear warm-up to the peak lr", 0.0, 1e6));
    k.push_back(string_key("train.schedule", &Config::schedule, "decay after warm-up",
                           {"cosine", "step", "constant"}));
    k.push_back(real_key("train.step_epochs", &Config::step_epochs,
                         "step: multiply the lr by train.step_gamma every this many epochs",
                         1e-6, 1e6));
    k.push_back(real_key("train.step_gamma", &Config::step_gamma, "step: the factor", 0.0, 1.0));
    k.push_back(real_key("train.min_lr_ratio", &Config::min_lr_ratio,
                         "cosine: final lr as a fraction of the peak", 0.0, 1.0));
    k.push_back(real_key("train.momentum", &Config::momentum, "SGD momentum", 0.0, 0.999999));
    k.push_back(bool_key("train.nesterov", &Config::nesterov, "Nesterov momentum"));
    k.push_back(real_key("train.weight_decay", &Config::weight_decay,
                         "L2 weight decay on convolution and classifier weights", 0.0, 1.0));
    k.push_back(bool_key("train.decay_bn_and_bias", &Config::decay_bn_and_bias,
                         "apply weight decay to batch norm scales/shifts and biases too"));
    k.push_back(int_key("train.eval_every", &Config::eval_every,
                        "steps between validation passes; 0 = at each epoch's end", 0, kBig));
    k.push_back(int_key("train.eval_batches", &Config::eval_batches,
                        "batches per validation pass; 0 = the whole validation set", 0,
                        1 << 30));
    k.push_back(string_key("parallel.communicator", &Config::communicator,
                           "auto: several ranks talk over NCCL on GPUs, MPI on CPUs (TCP "
                           "without an MPI launcher: torchrun); one process otherwise",
                           {"auto", "mpi", "tcp", "nccl", "none"}));
    k.push_back(bool_key("parallel.sync_batchnorm", &Config::sync_batchnorm,
                         "batch norm statistics over every rank's images (one all-reduce per "
                         "layer) instead of each rank's own"));
    k.push_back(bool_key("parallel.overlap_allreduce", &Config::overlap_allreduce,
                         "GPU ranks: sum ~25 MiB buckets of gradients while the backward "
                         "goes on (false: after it)"));
    k.push_back(int_key("parallel.zero_stage", &Config::zero_stage,
                        "0: every rank keeps the whole SGD momentum (DDP); 1: ZeRO-1, the "
                        "gradients reduce-scattered and the momentum sharded over the ranks "
                        "(CPU or GPU), the parameters all-gathered after each step", 0, 1));
    k.push_back(timeout_key<Config>());
    add_common_run_keys(k);  // run.dir, run.name, run.checkpoint_every, run.keep_checkpoints
    return k;
  }
}

const config::Schema<Config>& schema() {
  static const config::Schema<Config> s(keys(), "vision config key",
                                        "resolved aiscale vision training configuration");
  return s;
}

void validate_config(const Config& c, const std::string& source) {
  if (c.data_kind != "synthetic" && c.train_data.empty())
    fail("{}: data.train is empty: name the training images (data.kind = \"{}\"), or use "
         "data.kind = \"synthetic\"", source, c.data_kind);
  if (c.stage != "none" && c.stage != "ram" && !c.stage.starts_with("local:"))
    fail("{}: data.stage = \"{}\": use none, ram or local:DIR", source, c.stage);
  if (c.stem_stride > 0 && c.preset != "resnet-small")
    fail("{}: model.stem_stride applies to resnet-small's 3x3 stem, not to {}'s ImageNet stem",
         source, c.preset);
  if (c.device == "cpu" && (c.precision != "fp32" || c.tf32))
    fail("{}: train.precision = \"{}\"{} needs train.device = \"cuda\"; the CPU trains in fp32",
         source, c.precision, c.tf32 ? " with train.tf32" : "");
  if (c.device == "cpu" && c.batchnorm == "cudnn")
    fail("{}: train.batchnorm = \"{}\" needs train.device = \"cuda\"", source, c.batchnorm);
  if (c.device == "cuda" && c.sync_batchnorm)
    fail("{}: parallel.sync_batchnorm is not available on the GPU yet: set it to false (each "
         "rank normalises with its own batch) or train on the CPU", source);
  if (c.steps == 0 && c.epochs <= 0)
    fail("{}: train.steps = 0 and train.epochs = {}: set one of them above 0", source, c.epochs);
}

}  // namespace

bool is_vision_config(const std::string& toml_text, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    if (o == "model.kind=resnet" || o == "model.kind=\"resnet\"") return true;
  }
  try {
    const toml::table root = toml::parse(toml_text);
    if (auto kind = root["model"]["kind"].value<std::string>()) return *kind == "resnet";
    if (auto preset = root["model"]["preset"].value<std::string>()) {
      const auto names = nn::resnet_preset_names();
      return std::find(names.begin(), names.end(), *preset) != names.end();
    }
  } catch (const toml::parse_error&) {
  }
  return false;
}

VisionTrainConfig parse_vision_config(const std::string& text, const std::string& source,
                                      const std::vector<std::string>& overrides) {
  return schema().parse(text, source, overrides, {}, {}, {}, validate_config);
}

VisionTrainConfig load_vision_config(const std::string& path,
                                     const std::vector<std::string>& overrides) {
  return parse_vision_config(read_file(path), path, overrides);
}

std::string to_toml(const VisionTrainConfig& c) { return schema().to_toml(c); }

std::vector<config::KeyInfo> vision_config_keys() { return schema().infos(); }

std::string vision_config_reference() { return config::key_lines(schema().infos()); }

}  // namespace aiscale::train
