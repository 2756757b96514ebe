#include "aiscale/bench/vision.h"

#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/rng.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/timer.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/optim/sgd.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/step_log.h"

namespace aiscale::bench {
namespace {

// The fields both devices' records share: the batch, the timed steps and what they did.
nlohmann::json step_fields(const VisionBenchOptions& o, const nn::ResNetConfig& mc, int world,
                           const std::vector<double>& times, double flops_per_image, double loss) {
  const double step_s = median(times);
  const int64_t global_batch = o.batch_size * world;
  return {{"batch_size", o.batch_size},
          {"global_batch", global_batch},
          {"image_size", mc.image_size},
          {"channels", mc.in_channels},
          {"steps", o.steps},
          {"warmup", o.warmup},
          {"step_time_median_s", step_s},
          {"step_time_p90_s", percentile(times, 0.9)},
          {"images_per_s", double(global_batch) / step_s},
          {"images_per_s_per_rank", double(o.batch_size) / step_s},
          {"train_flops_per_image", flops_per_image},
          {"achieved_flops", flops_per_image * double(global_batch) / step_s},
          {"final_loss", loss}};
}


// The GPU run: images and labels loaded to the device once; every step is forward,
// backward (the gradient buckets summed over the ranks as it goes), and the SGD update.
nlohmann::json run_vision_bench_cuda(const VisionBenchOptions& o, nn::ResNet& host,
                                     parallel::Communicator& comm) {
  const nn::ResNetConfig& mc = host.config();
  nn::ResNetCudaOptions co;
  co.max_batch = o.batch_size;
  co.precision = o.precision;
  co.tf32 = o.tf32;
  co.batchnorm = o.batchnorm;
  co.workspace_mib = o.cudnn_workspace_mib;
  co.momentum = 0.9;
  co.weight_decay = 5e-5;  // the PyTorch peer's settings
  co.comm = &comm;
  co.overlap = o.overlap;
  nn::ResNetCuda model(host, co);
  Rng rng(o.seed + uint64_t(comm.rank()));
  std::vector<float> images(o.batch_size * mc.in_channels * mc.image_size * mc.image_size);
  std::vector<int32_t> labels(o.batch_size);
  for (float& v : images) v = rng.normal();
  for (int32_t& l : labels) l = int32_t(rng.below(uint64_t(mc.num_classes)));
  model.load_batch(images.data(), labels.data(), o.batch_size);

  std::vector<double> times;
  double loss = 0;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    comm.barrier();
    if (i == o.warmup) parallel::cuda_profiler_range(true);  // a profiler records the timed steps
    Timer t;
    loss = model.forward_loaded(true);
    model.zero_grad();
    model.backward();
    model.reduce_gradients();
    model.sgd_step(0.01, 1.0f / float(comm.world()));
    model.synchronize();
    double seconds = t.seconds();
    comm.allreduce_sum(&seconds, 1);
    if (i >= o.warmup) times.push_back(seconds / comm.world());
  }
  parallel::cuda_profiler_range(false);
  const double flops_per_image = 3.0 * host.forward_flops_per_image();
  nlohmann::json j = {{"bench", "vision"},
          {"model", o.model},
          {"parameters", host.num_parameters()},
          {"device", "cuda"},
          {"gpu", parallel::cuda_current_gpu_name()},
          {"precision", o.precision},
          {"tf32", o.tf32},
          {"overlap_allreduce", o.overlap},
          {"batchnorm", o.batchnorm},
          {"cudnn_workspace_mib", o.cudnn_workspace_mib},
          {"kernels", model.describe()},
          {"world_size", comm.world()},
          {"communicator", comm.backend()},
          {"peak_memory_bytes", double(model.arena_bytes())},
          {"date", utc_iso8601()}};
  j.update(step_fields(o, mc, comm.world(), times, flops_per_image, loss));
  return j;
}

}  // namespace

nlohmann::json run_vision_bench(const VisionBenchOptions& options, parallel::Communicator& comm) {
  VisionBenchOptions o = options;
  const bool gpu = o.device == "cuda";
  if (!gpu && o.device != "cpu")
    fail("bench vision: --device '{}' is not one of cpu, cuda", o.device);
  if (!gpu && (o.precision != "fp32" || o.tf32))
    fail("bench vision: --precision {}{} needs --device cuda; the CPU runs fp32", o.precision,
         o.tf32 ? " --tf32" : "");
  if (o.batch_size == 0) o.batch_size = gpu ? 256 : 16;
  if (o.batch_size < 1 || o.steps < 1 || o.warmup < 0)
    fail("bench vision: --batch-size and --steps must be >= 1 and --warmup >= 0");
  nn::ResNetConfig mc = nn::resnet_preset(o.model);
  if (o.image_size > 0) mc.image_size = o.image_size;
  const int threads = train::set_cpu_threads(o.threads);
  nn::ResNetOptions mo;
  mo.max_batch = gpu ? 0 : o.batch_size;  // the GPU model keeps its own activations
  mo.seed = o.seed;
  nn::ResNet model(mc, mo, ops::vision::vision_cpu_backend());
  if (gpu) return run_vision_bench_cuda(o, model, comm);
  optim::Sgd sgd(model.num_parameters(), {0.9, false, 1e-4});

  // One batch of random images and labels, made once: the steps time the model only.
  Rng rng(o.seed + uint64_t(comm.rank()));
  std::vector<float> images(o.batch_size * mc.in_channels * mc.image_size * mc.image_size);
  std::vector<int32_t> labels(o.batch_size);
  for (float& v : images) v = rng.normal();
  for (int32_t& l : labels) l = int32_t(rng.below(uint64_t(mc.num_classes)));

  std::vector<double> times;
  double loss = 0;
  std::vector<float>& grads = model.grads();
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    comm.barrier();
    Timer t;
    loss = model.forward(images.data(), labels.data(), o.batch_size, true);
    model.zero_grad();
    model.backward();
    if (comm.world() > 1) {
      comm.allreduce_sum(grads.data(), int64_t(grads.size()));
      const float inv = 1.0f / float(comm.world());
      for (float& g : grads) g *= inv;
    }
    sgd.step(model.params().data(), grads.data(), 0.01);
    double seconds = t.seconds();
    comm.allreduce_sum(&seconds, 1);  // the ranks' mean step time
    if (i >= o.warmup) times.push_back(seconds / comm.world());
  }
  // Training FLOPs: forward + backward (data and weight gradients) = 3x the forward.
  const double flops_per_image = 3.0 * model.forward_flops_per_image();
  nlohmann::json j = {{"bench", "vision"},
          {"model", o.model},
          {"parameters", model.num_parameters()},
          {"device", "cpu"},
          {"cpu", cpu_model_name()},
          {"threads", threads},
          {"world_size", comm.world()},
          {"peak_memory_bytes", double(train::process_peak_rss_bytes())},
          {"date", utc_iso8601()}};
  j.update(step_fields(o, mc, comm.world(), times, flops_per_image, loss));
  return j;
}

}  // namespace aiscale::bench
