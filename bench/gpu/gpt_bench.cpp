// GPT training-step benchmark of the CUDA model, until `aiscale bench language` takes
// over. Measures what the PyTorch peer (torch_gpt2.py) measures: forward + backward +
// global-norm clipping + AdamW + zero_grad on one fixed random batch, host clock after a
// device synchronisation, median over the steps after warm-up. Prints one JSON line.
//
//   aiscale_gpt_bench --model gpt2-124m --batch 16 --seq 1024 [--precision bf16|fp32|fp16]
//                     [--steps 40] [--warmup 10] [--recompute 0|1]
// fp16 runs dynamic loss scaling (start 2^16, halve on overflow and skip the step,
// double after 1000 good steps).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"

using namespace aiscale;

namespace {

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--model NAME] [--batch B] [--seq T] [--precision bf16|fp32|fp16] "
               "[--steps S] [--warmup W] [--recompute 0|1]\n",
               prog);
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * double(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt2-124m", precision = "bf16";
  int64_t batch = 16, seq = 1024;
  int steps = 40, warmup = 10;
  bool recompute = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage(argv[0]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--seq") seq = std::stoll(next());
    else if (a == "--precision") precision = next();
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--recompute") recompute = next() != "0";
    else {
      usage(argv[0]);
      return 2;
    }
  }
  if (steps <= warmup) {
    std::fprintf(stderr, "--steps must exceed --warmup\n");
    return 2;
  }
  try {
    if (!nn::cuda_available()) {
      std::fprintf(stderr, "no CUDA GPU visible\n");
      return 77;
    }
    const nn::GptConfig config = nn::gpt_preset(model);
    nn::GptRunOptions o;
    o.batch = batch;
    o.seq = seq;
    o.precision = parse_dtype(precision);
    o.recompute = recompute;
    size_t free0 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    auto m = nn::make_gpt_cuda(config, o);
    const int64_t N = batch * seq;
    std::mt19937 rng(0);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(config.vocab_size - 1));
    std::vector<int32_t> x(N + batch), in(N), tg(N);
    for (auto& v : x) v = tok(rng);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seq; ++t) {
        in[b * seq + t] = x[b * (seq + 1) + t];
        tg[b * seq + t] = x[b * (seq + 1) + t + 1];
      }
    const bool fp16 = o.precision == DType::f16;
    float loss_scale = fp16 ? 65536.0f : 1.0f;
    int good_steps = 0, skipped = 0;
    ops::AdamWParams hp;
    hp.lr = 6e-4f;
    hp.weight_decay = 0.1f;
    hp.beta2 = 0.999f;  // PyTorch's default, as the peer uses
    std::vector<double> times, t_fwd, t_bwd, t_opt;  // phases: forward (to the loss),
                                                     // backward + norm, update + zero_grad
    float first_loss = NAN, last_loss = NAN;
    int64_t step_no = 0;
    size_t min_free = free0;
    for (int s = 0; s < steps; ++s) {
      cudaDeviceSynchronize();
      const auto t0 = std::chrono::steady_clock::now();
      const float loss = m->forward(in.data(), tg.data());
      const auto ta = std::chrono::steady_clock::now();
      m->backward(loss_scale);
      const double sumsq = m->grad_sum_squares();
      const auto tb = std::chrono::steady_clock::now();
      if (!std::isfinite(sumsq)) {  // fp16 overflow: skip, lower the scale
        loss_scale *= 0.5f;
        good_steps = 0;
        ++skipped;
      } else {
        const double norm = std::sqrt(sumsq) / loss_scale;
        const double clip = norm > 1.0 ? 1.0 / norm : 1.0;
        hp.step = ++step_no;
        hp.grad_scale = static_cast<float>(clip / loss_scale);
        m->update(hp);
        if (fp16 && ++good_steps == 1000) {
          loss_scale *= 2.0f;
          good_steps = 0;
        }
      }
      m->zero_grad();
      cudaDeviceSynchronize();
      const auto t1 = std::chrono::steady_clock::now();
      if (s == 0) first_loss = loss;
      last_loss = loss;
      if (s >= warmup) {
        times.push_back(std::chrono::duration<double>(t1 - t0).count());
        t_fwd.push_back(std::chrono::duration<double>(ta - t0).count());
        t_bwd.push_back(std::chrono::duration<double>(tb - ta).count());
        t_opt.push_back(std::chrono::duration<double>(t1 - tb).count());
      }
      size_t f = 0, tt = 0;
      cudaMemGetInfo(&f, &tt);
      min_free = std::min(min_free, f);
    }
    const double med = percentile(times, 0.5), p90 = percentile(times, 0.9);
    const double flops_tok = nn::gpt_train_flops_per_token(config, seq);
    cudaDeviceProp prop{};
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    std::printf(
        "{\"impl\": \"aiscale-cuda\", \"model\": \"%s\", \"params\": %lld, \"batch\": %lld, "
        "\"seq\": %lld, \"precision\": \"%s\", \"recompute\": %d, \"steps\": %d, \"warmup\": %d, "
        "\"median_step_s\": %.6f, \"p90_step_s\": %.6f, \"fwd_ms\": %.2f, \"bwd_ms\": %.2f, "
        "\"opt_ms\": %.2f, \"tokens_per_s\": %.1f, "
        "\"tflops_per_gpu\": %.2f, \"model_mem_gib\": %.3f, \"peak_mem_gib\": %.3f, "
        "\"loss_first\": %.4f, \"loss_last\": %.4f, \"skipped_steps\": %d, \"gpu\": \"%s\"}\n",
        model.c_str(), static_cast<long long>(config.num_params()), static_cast<long long>(batch),
        static_cast<long long>(seq), precision.c_str(), int(recompute), steps, warmup, med, p90,
        1e3 * percentile(t_fwd, 0.5), 1e3 * percentile(t_bwd, 0.5), 1e3 * percentile(t_opt, 0.5),
        double(N) / med, flops_tok * double(N) / med / 1e12,
        double(m->memory_bytes()) / double(1ull << 30), double(free0 - min_free) / double(1ull << 30),
        first_loss, last_loss, skipped, prop.name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
