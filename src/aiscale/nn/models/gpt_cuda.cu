// GPT-2 on one CUDA GPU: forward, backward and AdamW over the ops of ops/cuda.
//
// Precision: activations and the working copy of the weights in the run's dtype (bf16 by
// default; fp16; fp32 for checks), fp32 accumulation everywhere, fp32 master weights,
// gradients (one flat buffer in gpt_param_infos order, usable for all-reduce) and AdamW
// moments. Memory: one cudaMalloc at construction holds everything, including the
// cuBLASLt workspace; a step allocates nothing.
//
// Fusions (each with a plain fallback, see docs/perf-notes.md):
// - bias, residual add, GELU (+ its pre-activation for backward) in the GEMM epilogues;
//   dGELU and the bias gradient of the MLP's first layer in a backward GEMM's epilogue;
// - the bias gradients of the two projections that write into the residual stream come
//   out of the LayerNorm backward kernels (column sums of the residual gradient);
// - softmax + cross-entropy + its backward in one kernel during forward, dlogits written
//   in place over the logits (scaled by the last grad_multiplier; backward corrects any
//   change through the GEMMs' alpha);
// - flash attention forward / backward (no (T, T) matrix).
//
// Data parallelism (options.comm with a device stream, i.e. NCCL, and several ranks): the
// model synchronises its gradients itself. The flat gradient buffer is cut into buckets of
// whole layers (~options.bucket_mib) in the order backward completes them: the token and
// position embeddings first (complete after the LM head's weight gradient, except for the
// embedding backward, see below), then the top layers with the final LayerNorm, down to
// layer 0, whose bucket is cut in three where its parameters complete (the MLP, the
// attention, the first LayerNorm) to shorten what stays exposed. Each bucket is summed
// (all-reduce; ZeRO-1: reduce-scatter) on the communicator's stream as soon as its event
// on the model stream fires, while backward goes on. The embedding backward would
// complete the large tied-embedding bucket only at the very end; instead every rank
// all-gathers the others' input gradient d(res0) (the copy engines push it beside the last
// buckets) and tokens and runs the embedding backward over all ranks' positions, which
// adds exactly the summed contribution. Non-final micro-steps of gradient accumulation communicate
// nothing. ZeRO-1: bucket boundaries are rounded down to multiples of the world size (the
// few values moved across a boundary are the tail of the bias of a residual projection,
// complete one layer earlier, or of wpe, which the gathered embedding backward writes
// only after every bucket is reduced); rank r owns the r-th equal part of every bucket:
// fp32 master weights and AdamW moments for those parts only, AdamW there, then an
// all-gather of the new working copy. options.grad_comm = bf16: each bucket is rounded to
// bf16 on the model's stream, summed in bf16 and widened to fp32 on NCCL's stream.
// Over the copy engines (fp32, no ZeRO) the sum kernels also add up the squares of the
// sums, so the gradient norm needs no pass over the buffer of its own: the ranks' shares
// are all-gathered, and only the embeddings, which the embedding backward changes after
// their sum, are squared again.
//
// Tuning switches for measurements (read once, at construction):
//   AISCALE_CUDA_ATTENTION = auto | cudnn | flash | flash_narrow | flash_occ3 |
//                            flash_two_barrier | simple (auto: cuDNN's fused engines where
//                            this build has cuDNN and they support the shape, else flash)
//   AISCALE_CUDA_FUSED_GELU, _FUSED_DGELU, _FUSED_BGRAD, _FUSED_XENT = 0 | 1
//   AISCALE_CUDA_LMHEAD_PAD = 0 | 1 (dwte GEMM over the padded vocabulary)
//   AISCALE_CUDA_AUTOTUNE = 0 | 1 (time cuBLASLt's candidates in the warm-up step)
//   AISCALE_CUDA_VERBOSE = 1 prints the chosen paths and GEMM plans to stderr.
//   AISCALE_CUDA_TIMING = 1 times the phases of every training step on the model stream
//     (CUDA events; adds a host wait per step), the forward phase split where its kernels
//     end and the host's time in the parts of forward(), the host's time in collective calls and,
//     per gradient bucket, when it was ready and how long its collective took, and
//     prints their means per rank at exit.
//   AISCALE_CUDA_COMM_THREAD = 0 makes the collective calls on the model's thread;
//   AISCALE_CUDA_STREAM_PRIORITY = high gives the model's stream the highest priority
//   (both measured without effect on 2x H200: docs/perf-notes.md).
//   AISCALE_CUDA_SPLIT_LAST_BUCKET = 0 keeps layer 0's gradients in one bucket;
//   AISCALE_CUDA_FUSED_NORM = 0 computes the gradient norm in a pass of its own also with
//     the copy engines, whose sum kernels otherwise add up its squares as they go;
//   AISCALE_CUDA_CAST_ON_COMM = 0 rounds the buckets to bf16 (parallel.grad_comm = bf16)
//     on the model's stream instead of the communicator's;
//   AISCALE_CUDA_PUSH_DRES = 0 all-gathers d(res0) on the communicator's stream after the
//     buckets also with the copy engines, which otherwise push it beside them (both within
//     the run-to-run spread on 2x H200, 0.03-0.1 ms faster: perf-notes.md, session 5).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <numeric>
#include <mutex>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "aiscale/core/stats.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/cuda/copy_engine_group.h"

namespace aiscale::nn {
namespace detail {

int cuda_device_count_checked() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {

using cuda::AttentionImpl;
using cuda::Gemm;
using cuda::LinearOptions;

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0 && std::strcmp(v, "off") != 0;
}

// train.attention (or bench --attention) when it names kernels, else
// AISCALE_CUDA_ATTENTION (which also knows the measurement variants), else automatic.
// (make_gpt has checked the option's value; the variable's is checked here.)
AttentionImpl choose_attention(const std::string& option) {
  static constexpr std::pair<const char*, AttentionImpl> kNames[] = {
      {"auto", AttentionImpl::automatic},       {"cudnn", AttentionImpl::cudnn},
      {"flash", AttentionImpl::flash},          {"simple", AttentionImpl::simple},
      {"flash_narrow", AttentionImpl::flash_narrow}, {"flash_occ3", AttentionImpl::flash_occ3},
      {"flash_two_barrier", AttentionImpl::flash_two_barrier}};
  const char* env = std::getenv("AISCALE_CUDA_ATTENTION");
  const std::string name = option != "auto" ? option : env && *env ? env : "auto";
  for (const auto& [n, impl] : kNames)
    if (name == n) return impl;
  throw Error("AISCALE_CUDA_ATTENTION = '" + name +
              "': use auto, cudnn, flash, flash_narrow, flash_occ3, flash_two_barrier or simple");
}

// Runs the communicator's calls on a thread of their own, in order. An NCCL call can hold
// its caller until the GPU reaches the event it is ordered after; on the model's thread
// that would keep the host from queueing the next layers' kernels (the GPU then idles at
// every bucket). The model's thread only records events and posts; it drains the queue
// before it touches the communicator itself or waits on an event the worker records.
class CommQueue {
 public:
  CommQueue(int device, bool threaded) : threaded_(threaded) {
    if (threaded_) thread_ = std::thread([this, device] { run(device); });
  }
  ~CommQueue() {
    if (!threaded_) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> task) {
    if (!threaded_) return task();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  // Returns once every posted task has run; rethrows the first failure (after which the
  // remaining tasks were skipped).
  void drain() {
    if (!threaded_) return;
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] { return tasks_.empty() && !busy_; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  void run(int device) {
    cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      const bool skip = error_ != nullptr;
      lock.unlock();
      std::exception_ptr failure;
      if (!skip) {
        try {
          task();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      lock.lock();
      if (failure && !error_) error_ = failure;
      busy_ = false;
      if (tasks_.empty()) idle_cv_.notify_all();
    }
  }

  bool threaded_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
};

// Bump allocator over one device allocation: first pass sizes, second pass hands out.
struct ArenaPlan {
  size_t total = 0;
  size_t add(size_t bytes) {
    const size_t off = total;
    total += (bytes + 255) / 256 * 256;
    return off;
  }
};

// Offsets (in elements) of one layer's parameters inside a flat buffer, relative to the
// layer's start: the order of gpt_param_infos.
struct LayerOffsets {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w,
      fcproj_b, size;
  explicit LayerOffsets(int64_t C) {
    int64_t o = 0;
    auto next = [&](int64_t n) { const int64_t r = o; o += n; return r; };
    ln1_w = next(C);
    ln1_b = next(C);
    qkv_w = next(3 * C * C);
    qkv_b = next(3 * C);
    proj_w = next(C * C);
    proj_b = next(C);
    ln2_w = next(C);
    ln2_b = next(C);
    fc_w = next(4 * C * C);
    fc_b = next(4 * C);
    fcproj_w = next(4 * C * C);
    fcproj_b = next(C);
    size = o;
  }
};

class GptCuda final : public GptModel {
 public:
  GptCuda(const GptConfig& c, const GptRunOptions& o, const std::vector<float>& init)
      : config_(c),
        options_(o),
        t_(o.precision),
        es_(dtype_size(o.precision)),
        B_(o.batch),
        T_(o.seq),
        C_(c.n_embd),
        NH_(c.n_head),
        L_(c.n_layer),
        V_(c.vocab_size),
        Vp_((c.vocab_size + 127) / 128 * 128),
        maxT_(c.block_size),
        N_(o.batch * o.seq),
        lay_(c.n_embd) {
    P_ = V_ * C_ + maxT_ * C_ + L_ * lay_.size + 2 * C_;
    Pw_ = P_ + (Vp_ - V_) * C_;
    AISCALE_CUDA_REQUIRE(static_cast<int64_t>(init.size()) == P_,
                         "init has " + std::to_string(init.size()) + " values");
    attention_impl_ = choose_attention(options_.attention);
    linear_.fused_gelu = env_flag("AISCALE_CUDA_FUSED_GELU", true);
    linear_.fused_bgrad = env_flag("AISCALE_CUDA_FUSED_BGRAD", true);
    linear_.fused_dgelu = env_flag("AISCALE_CUDA_FUSED_DGELU", false);
    // Only where the padded rows land inside wpe's gradient.
    lm_head_padded_dw_ = env_flag("AISCALE_CUDA_LMHEAD_PAD", true) && maxT_ >= Vp_ - V_;
    autotune_ = env_flag("AISCALE_CUDA_AUTOTUNE", true);
    fused_xent_ = env_flag("AISCALE_CUDA_FUSED_XENT", true);
    verbose_ = env_flag("AISCALE_CUDA_VERBOSE", false);
    timing_ = env_flag("AISCALE_CUDA_TIMING", false);
    if (!cuda::attention_supported(t_, C_ / NH_))
      throw Error("the CUDA attention kernels do not support head size " +
                  std::to_string(C_ / NH_));

    AISCALE_CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp prop{};
    AISCALE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
    // AISCALE_CUDA_STREAM_PRIORITY=high: the model's stream gets the device's highest
    // priority, so that its blocks go first where they compete with NCCL's kernels.
    const char* prio = std::getenv("AISCALE_CUDA_STREAM_PRIORITY");
    if (prio && std::strcmp(prio, "high") == 0) {
      int least = 0, greatest = 0;
      AISCALE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      AISCALE_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    } else {
      AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&loss_ready_, cudaEventDisableTiming));
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&buckets_sent_, cudaEventDisableTiming));
    if (timing_) {
      for (auto& e : phase_) AISCALE_CUDA_CHECK(cudaEventCreate(&e));
      AISCALE_CUDA_CHECK(cudaEventCreate(&fwd_end_));
    }
    // cuDNN's fused attention: asked for, or by default where this build has cuDNN and
    // its engines take the shape (else the own flash kernels, with a note).
    if (attention_impl_ == AttentionImpl::cudnn ||
        (attention_impl_ == AttentionImpl::automatic && cuda::cudnn_attention_compiled() &&
         t_ != DType::f32)) {
      try {
        cudnn_attention_ = std::make_unique<cuda::CudnnAttention>(t_, B_, T_, NH_, C_ / NH_);
      } catch (const Error& e) {
        if (attention_impl_ == AttentionImpl::cudnn) throw;
        std::fprintf(stderr, "[aiscale cuda] cuDNN attention unavailable, using flash: %s\n",
                     e.what());
      }
    }
    plan_data_parallel();
    allocate();
    if (dp_ && options_.grad_transport == "copy-engine") {
      // Buckets and the d(res0) all-gather through the copy engines (CUDA IPC) instead of
      // NCCL's kernels; host-side collectives stay on the given communicator.
      int64_t largest = 0;
      for (const Bucket& b : buckets_) largest = std::max(largest, b.end - b.begin);
      parallel::CopyEngineGroupOptions o;
      o.arena = arena_;
      o.arena_bytes = arena_bytes_;
      o.staging_bytes = size_t(2 * largest + 64 * world_) * dtype_size(comm_t_);
      o.timeout_s = options_.comm_timeout_s;
      copy_engine_ = parallel::make_copy_engine_group(*comm_, o);
      comm_ = copy_engine_.get();
    }
    // The gradient norm out of the buckets' sums where the transport sums with its own
    // kernels (the copy engines): without ZeRO, in fp32; AISCALE_CUDA_FUSED_NORM=0 keeps
    // the norm's own pass over the buffer (for measurements).
    fused_norm_ = dp_ && !zero_ && comm_t_ == DType::f32 && comm_->fuses_sum_squares() &&
                  env_flag("AISCALE_CUDA_FUSED_NORM", true);
    n_fused_buckets_ = 0;
    for (const Bucket& b : buckets_) n_fused_buckets_ += fused_norm_bucket(b) ? 1 : 0;
    if (n_fused_buckets_ == 0) fused_norm_ = false;
    gemm_ = std::make_unique<Gemm>(gemm_workspace_, Gemm::kWorkspaceBytes);

    // Parameters: master copy, working copy (padded vocabulary rows are zero), state.
    AISCALE_CUDA_CHECK(cudaMemsetAsync(arena_, 0, arena_bytes_, stream_));
    set_params(init.data());
    sync_ = false;  // the warm-up step communicates nothing
    warm_up();
    sync_ = true;
    phases_recorded_ = 0;
    // The warm-up forward (GEMM autotuning, first launches) is not a training step.
    for (auto& v : host_laps_) v.clear();
    if (verbose_) {
      std::fprintf(stderr,
                   "[aiscale cuda] %s, %s, B=%lld T=%lld, arena %.2f GiB, attention %s, "
                   "fused gelu %d, dgelu %d, bgrad %d, xent %d, lm-head pad %d, autotune %d, "
                   "recompute %d\n",
                   device_name_.c_str(), cuda::dtype_str(t_),
                   static_cast<long long>(B_), static_cast<long long>(T_),
                   double(arena_bytes_) / double(1 << 30),
                   attention_kernels().c_str(),
                   int(linear_.fused_gelu), int(linear_.fused_dgelu), int(linear_.fused_bgrad),
                   int(fused_xent_), int(lm_head_padded_dw_), int(autotune_),
                   int(options_.recompute));
    }
  }

  ~GptCuda() override {
    const size_t timed_steps = step_ms_[0].size();
    if (timing_ && timed_steps > 0) {
      // Means over the timed steps (the forward split: over the same count).
      const double k = 1.0 / double(timed_steps);
      const auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
      const auto mean = [&](const std::vector<double>& v) { return v.empty() ? 0.0 : sum(v) / double(v.size()); };
      std::fprintf(stderr,
                   "[aiscale cuda] rank %lld: mean of %lld steps (ms): forward %.3f, backward to "
                   "layer 0 %.3f, embedding tail %.3f, gap before update %.3f, update %.3f; "
                   "host in collective calls %.3f, host waiting for collectives %.3f\n",
                   static_cast<long long>(rank_), static_cast<long long>(timed_steps),
                   mean(step_ms_[0]), mean(step_ms_[1]), mean(step_ms_[2]), mean(step_ms_[3]),
                   mean(step_ms_[4]), host_comm_s_ * 1e3 * k, host_wait_s_ * 1e3 * k);
      std::fprintf(stderr,
                   "[aiscale cuda] rank %lld: forward split (ms): kernels up to the loss %.3f, "
                   "then the GPU waiting for backward's launch %.3f; the host per forward "
                   "with targets: launches %.3f, staging and token all-gather wait %.3f, token "
                   "buckets %.3f, loss wait %.3f\n",
                   static_cast<long long>(rank_), sum(fwd_kernels_ms_) * k, sum(before_bwd_ms_) * k,
                   mean(host_laps_[0]), mean(host_laps_[1]), mean(host_laps_[2]), mean(host_laps_[3]));
      // Medians: one slow step (the first synchronising step waits for the slowest rank's
      // start-up) moves the means by a millisecond over 60 steps, not the medians.
      std::fprintf(stderr,
                   "[aiscale cuda] rank %lld: median of %lld steps (ms): forward %.3f (kernels up "
                   "to the loss %.3f, then waiting for backward's launch %.3f), backward to layer "
                   "0 %.3f, embedding tail %.3f, gap before update %.3f, update %.3f; the host per "
                   "forward: launches %.3f, staging and token all-gather wait %.3f, token buckets "
                   "%.3f, loss wait %.3f\n",
                   static_cast<long long>(rank_), static_cast<long long>(timed_steps),
                   median(step_ms_[0]), median(fwd_kernels_ms_), median(before_bwd_ms_), median(step_ms_[1]),
                   median(step_ms_[2]), median(step_ms_[3]), median(step_ms_[4]),
                   median(host_laps_[0]), median(host_laps_[1]), median(host_laps_[2]),
                   median(host_laps_[3]));
      for (const Bucket& b : buckets_) {
        if (b.timed_steps == 0) continue;
        const double kb = 1.0 / double(b.timed_steps);
        std::fprintf(stderr,
                     "[aiscale cuda] rank %lld: bucket [%lld, %lld) %.1f MB: ready at %.3f ms "
                     "into backward, collective %.3f ms, done at %.3f ms\n",
                     static_cast<long long>(rank_), static_cast<long long>(b.begin),
                     static_cast<long long>(b.end),
                     double(b.end - b.begin) * double(dtype_size(comm_t_)) / 1e6, b.ready_ms * kb,
                     b.comm_ms * kb, b.done_ms * kb);
      }
    }
    for (auto& e : phase_)
      if (e) cudaEventDestroy(e);
    if (fwd_end_) cudaEventDestroy(fwd_end_);
    if (comm_pending_) {  // never free memory a collective may still use
      try {
        comm_queue_->drain();
        comm_->wait();
      } catch (const std::exception&) {
      }
    }
    comm_queue_.reset();
    copy_engine_.reset();  // unmaps the peers' buffers before this arena is freed
    gemm_.reset();
    if (arena_) cudaFree(arena_);
    if (host_staging_) cudaFreeHost(host_staging_);
    if (loss_ready_) cudaEventDestroy(loss_ready_);
    if (buckets_sent_) cudaEventDestroy(buckets_sent_);
    for (auto& b : buckets_) {
      if (b.ready) cudaEventDestroy(b.ready);
      if (b.cast) cudaEventDestroy(b.cast);
      if (b.done) cudaEventDestroy(b.done);
    }
    if (tokens_ready_) cudaEventDestroy(tokens_ready_);
    if (comm_done_) cudaEventDestroy(comm_done_);
    if (dres_ready_) cudaEventDestroy(dres_ready_);
    if (update_done_) cudaEventDestroy(update_done_);
    if (embed_done_) cudaEventDestroy(embed_done_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const GptConfig& config() const override { return config_; }
  const GptRunOptions& options() const override { return options_; }
  std::string device_name() const override { return device_name_; }
  std::string attention_kernels() const override {
    if (cudnn_attention_) return cudnn_attention_->describe();
    return cuda::attention_flash_supported(t_, C_ / NH_) && attention_impl_ != AttentionImpl::simple
               ? "flash"
               : "simple";
  }

  // One forward + backward on random tokens before the first real step: loads every
  // kernel and, with autotuning on, lets each GEMM time cuBLASLt's candidate algorithms
  // on the real buffers (some accumulate into the gradients, which are zeroed after).
  // Parameters and optimizer state are untouched.
  void warm_up() {
    std::vector<int32_t> in(static_cast<size_t>(N_)), tg(static_cast<size_t>(N_));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < N_; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      in[static_cast<size_t>(i)] = static_cast<int32_t>(x % static_cast<uint64_t>(V_));
      tg[static_cast<size_t>(i)] = static_cast<int32_t>((x >> 32) % static_cast<uint64_t>(V_));
    }
    gemm_->set_autotune(autotune_);
    forward(in.data(), tg.data());
    backward(1.0f);
    gemm_->set_autotune(false);
    zero_grad();
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    has_targets_ = false;
    forward_done_ = false;
    logits_state_ = LogitsState::consumed;
    grad_multiplier_hint_ = 1.0f;
    dlogits_multiplier_ = 1.0f;
  }

  float forward(const int32_t* inputs, const int32_t* targets) override {
    check_tokens(inputs, "token");
    if (targets) check_tokens(targets, "target");
    finish_comm();  // a ZeRO-1 all-gather of the working copy (bounded wait)
    collect_phases();
    // AISCALE_CUDA_TIMING: the host's time in the parts of a forward with targets.
    const bool host_timed = timing_ && targets != nullptr;
    auto lap_start = host_timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    auto lap = [&](int part) {
      if (!host_timed) return;
      const auto now = std::chrono::steady_clock::now();
      host_laps_[part].push_back(std::chrono::duration<double, std::milli>(now - lap_start).count());
      lap_start = now;
    };
    has_targets_ = targets != nullptr;
    // This forward/backward synchronises the gradients (and, overlapped, gathers every
    // rank's tokens for the embedding backward).
    sync_step_ = dp_ && sync_ && targets != nullptr;
    const bool gather_tokens = sync_step_ && overlap_;
    // Upload inputs (and targets) through pinned staging, asynchronously.
    std::memcpy(h_tokens_, inputs, size_t(N_) * 4);
    if (targets) std::memcpy(h_tokens_ + N_, targets, size_t(N_) * 4);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(d_tokens_, h_tokens_, size_t(targets ? 2 : 1) * N_ * 4,
                                       cudaMemcpyHostToDevice, stream_));
    const int32_t* d_inputs = d_tokens_;
    const int32_t* d_targets = d_tokens_ + N_;
    const int64_t N = N_, C = C_, B = B_, T = T_, NH = NH_;
    cudaStream_t s = stream_;
    if (gather_tokens) {
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(tokens_all_ + rank_ * N, d_tokens_, size_t(N) * 4,
                                         cudaMemcpyDeviceToDevice, s));
      AISCALE_CUDA_CHECK(cudaEventRecord(tokens_ready_, s));
      comm_->allgather_after(tokens_all_, N * 4, tokens_ready_);
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_tokens_all_, tokens_all_, size_t(world_ * N) * 4,
                                         cudaMemcpyDeviceToHost, comm_stream()));
      comm_pending_ = true;
    }

    mark_phase(0, targets != nullptr);
    cuda::embedding_forward(t_, res(0), d_inputs, wte_w(), wpe_w(), B, T, C, s);
    for (int64_t l = 0; l < L_; ++l) {
      Acts& a = acts_[l];
      cuda::layernorm_forward(t_, a.ln1, a.ln1_mean, a.ln1_rstd, res(l), pw(l, lay_.ln1_w),
                              pw(l, lay_.ln1_b), N, C, s);
      cuda::linear_forward(*gemm_, t_, a.qkv, nullptr, a.ln1, pw(l, lay_.qkv_w),
                           pw(l, lay_.qkv_b), nullptr, N, C, 3 * C, linear_, s);
      if (cudnn_attention_)
        cudnn_attention_->forward(a.atty, a.lse, a.qkv, cudnn_workspace_, s);
      else
        cuda::attention_forward(t_, a.atty, a.lse, a.qkv, B, T, C, NH, attention_impl_, s);
      cuda::linear_forward(*gemm_, t_, a.res_mid, nullptr, a.atty, pw(l, lay_.proj_w),
                           pw(l, lay_.proj_b), res(l), N, C, C, linear_, s);
      cuda::layernorm_forward(t_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, pw(l, lay_.ln2_w),
                              pw(l, lay_.ln2_b), N, C, s);
      cuda::linear_forward(*gemm_, t_, a.fc_gelu, a.fc_pre, a.ln2, pw(l, lay_.fc_w),
                           pw(l, lay_.fc_b), nullptr, N, C, 4 * C, linear_, s);
      cuda::linear_forward(*gemm_, t_, res(l + 1), nullptr, a.fc_gelu, pw(l, lay_.fcproj_w),
                           pw(l, lay_.fcproj_b), a.res_mid, N, 4 * C, C, linear_, s);
    }
    cuda::layernorm_forward(t_, lnf_, lnf_mean_, lnf_rstd_, res(L_), lnf_w(), lnf_b(), N, C, s);
    cuda::linear_forward(*gemm_, t_, logits_, nullptr, lnf_, wte_w(), nullptr, nullptr, N, C,
                         Vp_, linear_, s);
    forward_done_ = true;
    if (!targets) {
      logits_state_ = LogitsState::valid;
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
      return std::numeric_limits<float>::quiet_NaN();
    }
    // Loss (and, fused, dlogits scaled for the expected grad_multiplier).
    dlogits_multiplier_ = grad_multiplier_hint_;
    cuda::softmax_xent(t_, losses_, logits_, d_targets, N, V_, Vp_,
                       dlogits_multiplier_ / static_cast<float>(N), fused_xent_, s);
    logits_state_ = fused_xent_ ? LogitsState::gradient : LogitsState::valid;
    cuda::mean_reduce(loss_dev_, losses_, N, s);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_loss_, loss_dev_, 4, cudaMemcpyDeviceToHost, s));
    AISCALE_CUDA_CHECK(cudaEventRecord(loss_ready_, s));
    if (timing_ && phases_recorded_ == 1) {
      AISCALE_CUDA_CHECK(cudaEventRecord(fwd_end_, s));
      fwd_end_recorded_ = true;
    }
    lap(0);
    // While the GPU runs the forward pass: group token positions for embedding backward.
    AISCALE_CUDA_CHECK(cudaEventSynchronize(buckets_sent_));  // staging free again
    if (gather_tokens) {
      finish_comm();  // every rank's tokens are in h_tokens_all_
      lap(1);
      num_unique_ = cuda::build_token_buckets(h_tokens_all_, world_ * N, V_, h_unique_, h_offsets_,
                                              h_positions_, bucket_counts_);
    } else {
      lap(1);
      num_unique_ = cuda::build_token_buckets(inputs, N, V_, h_unique_, h_offsets_, h_positions_,
                                              bucket_counts_);
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(d_buckets_, h_buckets_, bucket_ints() * 4,
                                       cudaMemcpyHostToDevice, s));
    AISCALE_CUDA_CHECK(cudaEventRecord(buckets_sent_, s));
    lap(2);
    AISCALE_CUDA_CHECK(cudaEventSynchronize(loss_ready_));
    lap(3);
    return *h_loss_;
  }

  void backward(float grad_multiplier) override {
    if (!has_targets_ || logits_state_ == LogitsState::consumed)
      throw Error("backward() needs a forward() with targets before it");
    const int64_t N = N_, C = C_, B = B_, T = T_, NH = NH_;
    cudaStream_t s = stream_;
    float alpha = 1.0f;
    if (logits_state_ == LogitsState::gradient) {
      alpha = grad_multiplier / dlogits_multiplier_;
    } else {
      cuda::softmax_xent(t_, losses_, logits_, d_tokens_ + N_, N, V_, Vp_,
                         grad_multiplier / static_cast<float>(N), true, s);
    }
    grad_multiplier_hint_ = grad_multiplier;
    logits_state_ = LogitsState::consumed;
    mark_phase(1);

    // LM head (tied to wte): over the padded vocabulary for dlnf (padded rows of the
    // weight and of dlogits are zero), over the real rows for dwte.
    cuda::linear_backward_input(*gemm_, t_, dln_, logits_, wte_w(), N, C, Vp_, Vp_, alpha,
                                nullptr, nullptr, bias_scratch_, linear_, s);
    // dwte over the real V rows; or, measured option, over all Vp rows: the padded rows
    // then add exact zeros (dlogits is 0 there) to the first gradients of wpe, which
    // follow wte in the flat buffer, and the GEMM's n is a multiple of 128.
    cuda::linear_backward_weight(*gemm_, t_, grads_, nullptr, logits_, lnf_, N, C,
                                 lm_head_padded_dw_ ? Vp_ : V_, Vp_, alpha, bias_scratch_,
                                 linear_, s);
    const bool sync = sync_step_;
    const bool overlapped = sync && overlap_;
    if (overlapped) send_buckets_ready_after(kAfterLmHead);
    cuda::layernorm_backward(t_, dres_, g(lnf_w_off()), g(lnf_w_off() + C), 
                             L_ > 0 ? g(layer_off(L_ - 1) + lay_.fcproj_b) : nullptr, dln_,
                             res(L_), lnf_w(), lnf_mean_, lnf_rstd_, N, C, false, ln_scratch_, s);

    for (int64_t l = L_ - 1; l >= 0; --l) {
      Acts& a = acts_[l];
      const int64_t lo = layer_off(l);
      if (options_.recompute) {
        cuda::layernorm_forward(t_, a.ln1, a.ln1_mean, a.ln1_rstd, res(l), pw(l, lay_.ln1_w),
                                pw(l, lay_.ln1_b), N, C, s);
        cuda::layernorm_forward(t_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, pw(l, lay_.ln2_w),
                                pw(l, lay_.ln2_b), N, C, s);
        cuda::gelu_forward(t_, a.fc_gelu, a.fc_pre, N * 4 * C, s);
      }
      // MLP projection: dres = d(res[l + 1]); its bias gradient came from the LayerNorm
      // backward that produced dres.
      cuda::linear_backward_weight(*gemm_, t_, g(lo + lay_.fcproj_w), nullptr, dres_, a.fc_gelu,
                                   N, 4 * C, C, C, 1.0f, bias_scratch_, linear_, s);
      cuda::linear_backward_input(*gemm_, t_, dfc_, dres_, pw(l, lay_.fcproj_w), N, 4 * C, C, C,
                                  1.0f, a.fc_pre, bias_tmp_, bias_scratch_, linear_, s);
      cuda::add_inplace(g(lo + lay_.fc_b), bias_tmp_, 4 * C, s);
      // MLP first layer.
      cuda::linear_backward_weight(*gemm_, t_, g(lo + lay_.fc_w), nullptr, dfc_, a.ln2, N, C,
                                   4 * C, 4 * C, 1.0f, bias_scratch_, linear_, s);
      cuda::linear_backward_input(*gemm_, t_, dln_, dfc_, pw(l, lay_.fc_w), N, C, 4 * C, 4 * C,
                                  1.0f, nullptr, nullptr, bias_scratch_, linear_, s);
      cuda::layernorm_backward(t_, dres_, g(lo + lay_.ln2_w), g(lo + lay_.ln2_b),
                               g(lo + lay_.proj_b), dln_, a.res_mid, pw(l, lay_.ln2_w),
                               a.ln2_mean, a.ln2_rstd, N, C, true, ln_scratch_, s);
      if (overlapped && l == 0) send_buckets_ready_after(kLayer0Mlp);
      // Attention projection: dres = d(res_mid).
      cuda::linear_backward_weight(*gemm_, t_, g(lo + lay_.proj_w), nullptr, dres_, a.atty, N, C,
                                   C, C, 1.0f, bias_scratch_, linear_, s);
      cuda::linear_backward_input(*gemm_, t_, datty_, dres_, pw(l, lay_.proj_w), N, C, C, C,
                                  1.0f, nullptr, nullptr, bias_scratch_, linear_, s);
      if (cudnn_attention_)
        cudnn_attention_->backward(dqkv_, datty_, a.qkv, a.atty, a.lse, dq_accum_, delta_,
                                   cudnn_workspace_, s);
      else
        cuda::attention_backward(t_, dqkv_, datty_, a.qkv, a.atty, a.lse, B, T, C, NH,
                                 dq_accum_, delta_, attention_impl_, s);
      // QKV projection.
      cuda::linear_backward_weight(*gemm_, t_, g(lo + lay_.qkv_w), bias_tmp_, dqkv_, a.ln1, N, C,
                                   3 * C, 3 * C, 1.0f, bias_scratch_, linear_, s);
      cuda::add_inplace(g(lo + lay_.qkv_b), bias_tmp_, 3 * C, s);
      if (overlapped && l == 0) send_buckets_ready_after(kLayer0Qkv);
      cuda::linear_backward_input(*gemm_, t_, dln_, dqkv_, pw(l, lay_.qkv_w), N, C, 3 * C, 3 * C,
                                  1.0f, nullptr, nullptr, bias_scratch_, linear_, s);
      cuda::layernorm_backward(t_, dres_, g(lo + lay_.ln1_w), g(lo + lay_.ln1_b),
                               l > 0 ? g(layer_off(l - 1) + lay_.fcproj_b) : nullptr, dln_, res(l),
                               pw(l, lay_.ln1_w), a.ln1_mean, a.ln1_rstd, N, C, true,
                               ln_scratch_, s);
      // Without ZeRO the last bucket (layer 0) waits until the d(res0) all-gather is
      // queued, so that the embedding backward overlaps its sum instead of following it.
      if (overlapped && (l > 0 || zero_)) send_buckets_ready_after(l);
    }
    const int64_t Nb = bucket_capacity();
    mark_phase(2);
    if (overlapped) {
      // Every rank's d(res0): the embedding backward over all ranks' positions adds the
      // summed embedding gradient, after the buckets holding wte and wpe are reduced.
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(at(dres_all_, rank_ * N * C), dres_, size_t(N * C) * es_,
                                         cudaMemcpyDeviceToDevice, s));
      AISCALE_CUDA_CHECK(cudaEventRecord(dres_ready_, s));
      drain_comm_queue();  // the buckets' calls first; then this thread calls NCCL itself
      // The copy engines push every rank's part straight to the peers and this stream waits
      // for their arrival, not for the buckets still being summed (dres_all_ is then a
      // buffer of its own, whose readers of the previous step finished before its
      // host-level loss all-reduce). NCCL: an
      // all-gather queued after those buckets.
      const int64_t bytes = N * C * int64_t(es_);
      const bool pushed = push_dres_ && comm_->allgather_push(dres_all_, bytes, dres_ready_, s);
      if (!pushed) comm_->allgather_after(dres_all_, bytes, dres_ready_);
      // The embedding backward adds to the summed wte and wpe. Without ZeRO they lie wholly
      // in the first bucket (summed long ago: embed_done_); ZeRO-1's rounded boundaries can
      // move wpe's tail into layer 0's bucket, so then (and after a queued all-gather) it
      // follows everything queued so far. Without ZeRO, layer 0's bucket is summed beside it.
      cudaEvent_t before_embedding = embed_done_;
      if (zero_ || !pushed) {
        comm_->record(comm_done_);
        before_embedding = comm_done_;
      }
      if (!zero_) send_buckets_ready_after(0);
      AISCALE_CUDA_CHECK(cudaStreamWaitEvent(s, before_embedding, 0));
      cuda::embedding_backward(t_, grads_, g(V_ * C), dres_all_, d_buckets_, d_buckets_ + Nb,
                               d_buckets_ + 2 * Nb + 1, num_unique_, world_ * B, T, C, s);
    } else {
      cuda::embedding_backward(t_, grads_, g(V_ * C), dres_, d_buckets_, d_buckets_ + Nb,
                               d_buckets_ + 2 * Nb + 1, num_unique_, B, T, C, s);
      if (sync) send_buckets_ready_after(kAfterBackward);  // one bucket: everything
    }
    mark_phase(3);
    AISCALE_CUDA_LAUNCH_CHECK();
    if (verbose_ && !printed_plans_) {
      printed_plans_ = true;
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
      std::fprintf(stderr, "[aiscale cuda] GEMM plans:\n%s", gemm_->summary().c_str());
    }
  }

  void zero_grad() override {
    finish_comm();
    AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(Ppad_) * 4, stream_));
    if (fused_norm_) {
      // This rank's share of the squares; the buckets' sums wait for events after this.
      AISCALE_CUDA_CHECK(cudaMemsetAsync(sumsq_dev_ + rank_, 0, 8, stream_));
      fused_posted_ = 0;
    }
  }

  double grad_sum_squares() override {
    // The squares land in sumsq_dev_[0, parts) and add up on the host.
    size_t parts = 1;
    if (fused_norm_ && fused_posted_ == n_fused_buckets_) {
      // Every bucket of this step summed once since zero_grad, adding its squares: the
      // ranks' shares, gathered, and the embeddings' own (they change after their sum).
      drain_comm_queue();
      comm_->allgather_after(sumsq_dev_, 8, nullptr);
      comm_->record(comm_done_);
      parts = size_t(world_) + (overlap_ ? 1 : 0);
      if (overlap_)
        cuda::sum_squares(sumsq_dev_ + world_, grads_, buckets_.front().end, sumsq_scratch_, stream_);
      AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
    } else {
      if (comm_pending_) {
        // The norm kernels follow the last collective on the GPU (an event), not after the
        // host has seen the collectives end; the host's wait stays bounded (finish_comm).
        drain_comm_queue();
        comm_->record(comm_done_);
        AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
      }
      // Without ZeRO every rank holds all the sums; with ZeRO-1 this rank's parts hold them
      // and the squares of all parts add over ranks.
      if (!zero_) {
        cuda::sum_squares(sumsq_dev_, grads_, P_, sumsq_scratch_, stream_);
      } else {
        parts = buckets_.size();
        for (size_t k = 0; k < parts; ++k) {
          const Bucket& b = buckets_[k];
          cuda::sum_squares(sumsq_dev_ + k, grads_ + b.begin + rank_ * b.part, b.part,
                            sumsq_scratch_, stream_);
        }
      }
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_sumsq_, sumsq_dev_, parts * 8, cudaMemcpyDeviceToHost, stream_));
    finish_comm();
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    double total = 0.0;
    for (size_t k = 0; k < parts; ++k) total += h_sumsq_[k];
    if (zero_) comm_->allreduce_sum(&total, 1);
    return total;
  }

  void update(const ops::AdamWParams& hp) override {
    finish_comm();
    mark_phase(4);
    cuda::AdamWLayout L;
    L.n = P_;
    L.embeddings_end = V_ * C_ + maxT_ * C_;
    L.decay_embeddings = options_.decay_embeddings;
    L.layers_begin = L.embeddings_end;
    L.layer_size = lay_.size;
    L.n_layer = L_;
    const int64_t begin[4] = {lay_.qkv_w, lay_.proj_w, lay_.fc_w, lay_.fcproj_w};
    const int64_t count[4] = {3 * C_ * C_, C_ * C_, 4 * C_ * C_, 4 * C_ * C_};
    for (int j = 0; j < 4; ++j) {
      L.decay_begin[j] = begin[j];
      L.decay_end[j] = begin[j] + count[j];
    }
    L.work_split = V_ * C_;
    L.work_shift = (Vp_ - V_) * C_;
    if (zero_) {
      update_shards(L, hp);
    } else {
      cuda::adamw_update(t_, master_, work_, grads_, m_, v_, L, hp, stream_);
      AISCALE_CUDA_LAUNCH_CHECK();
    }
    mark_phase(5);
  }

  // ZeRO-1: AdamW on this rank's part of every bucket, writing the new working copy in
  // flat order into gather_; the all-gather completes gather_, which is then copied into
  // the working copy's padded layout.
  void update_shards(cuda::AdamWLayout L, const ops::AdamWParams& hp) {
    L.work_split = std::numeric_limits<int64_t>::max();
    L.work_shift = 0;
    for (const Bucket& b : buckets_) {
      const int64_t lo = b.begin + rank_ * b.part, hi = std::min(lo + b.part, P_);
      if (hi <= lo) continue;
      L.begin = lo;
      L.n = hi;
      L.state_offset = b.shard_offset;
      cuda::adamw_update(t_, master_, gather_, grads_, m_, v_, L, hp, stream_);
    }
    AISCALE_CUDA_LAUNCH_CHECK();
    AISCALE_CUDA_CHECK(cudaEventRecord(update_done_, stream_));
    comm_->group_begin();  // one launch for all buckets' all-gathers (the queue is drained)
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const Bucket& b = buckets_[k];
      comm_->allgather_after(at(gather_, b.begin), b.part * int64_t(es_), k == 0 ? update_done_ : nullptr);
    }
    comm_->group_end();
    comm_->record(comm_done_);
    comm_pending_ = true;
    AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
    copy_flat_to_work(gather_, stream_);
  }

  void logits_at(int64_t b, int64_t t, float* out) override {
    if (!forward_done_) throw Error("logits are not available: run forward() first");
    if (b < 0 || b >= B_ || t < 0 || t >= T_)
      throw Error("logits_at(" + std::to_string(b) + ", " + std::to_string(t) +
                  ") is outside the batch");
    const int64_t row = b * T_ + t;
    if (logits_state_ == LogitsState::valid) {
      cuda::cast_to_f32(t_, logits_row_, at(logits_, row * Vp_), V_, stream_);
    } else {
      // The logits were overwritten by their gradient: recompute this row from ln_f.
      cuda::logits_row(t_, logits_row_, at(lnf_, row * C_), wte_w(), V_, C_, stream_);
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, logits_row_, size_t(V_) * 4, cudaMemcpyDeviceToHost,
                                       stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // With ZeRO-1 the state is sharded: get_params / get_optimizer_state gather it (every
  // rank must call them) and, like set_params, use the gradient buffer as scratch.
  void get_params(float* out) const override {
    if (zero_) gather_shards(master_, out);
    else download(out, master_);
  }
  void set_params(const float* in) override {
    finish_comm();
    float* full = zero_ ? grads_ : master_;  // ZeRO-1: the whole vector passes through grads_
    upload(full, in);
    // Working copy: wte rows, then (after the zero padded rows) everything else.
    cuda::cast_from_f32(t_, work_, full, V_ * C_, stream_);
    AISCALE_CUDA_CHECK(cudaMemsetAsync(at(work_, V_ * C_), 0, size_t((Vp_ - V_) * C_) * es_,
                                       stream_));
    cuda::cast_from_f32(t_, at(work_, Vp_ * C_), full + V_ * C_, P_ - V_ * C_, stream_);
    if (zero_) {
      scatter_to_shard(in, master_);
      AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(Ppad_) * 4, stream_));
    }
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void get_grads(float* out) const override {
    finish_comm();
    download(out, grads_);
  }
  void set_grads(const float* in) override {
    finish_comm();
    upload(grads_, in);
  }
  void get_optimizer_state(float* m, float* v) const override {
    if (zero_) {
      gather_shards(m_, m);
      gather_shards(v_, v);
      return;
    }
    download(m, m_);
    download(v, v_);
  }
  void set_optimizer_state(const float* m, const float* v) override {
    finish_comm();
    if (zero_) {
      scatter_to_shard(m, m_);
      scatter_to_shard(v, v_);
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    upload(m_, m);
    upload(v_, v);
  }
  float* grad_buffer() override { return grads_; }
  float* param_buffer() override { return master_; }  // ZeRO-1: this rank's shard
  size_t memory_bytes() const override { return arena_bytes_; }
  size_t optimizer_state_bytes() const override { return size_t(3 * 4) * size_t(S_); }
  bool data_parallel() const override { return dp_; }
  void set_gradient_sync(bool on) override { sync_ = on; }
  bool collective_state() const override { return zero_; }

 private:
  enum class LogitsState { valid, gradient, consumed };

  // --- data parallelism (see the comment at the top) ---
  // Points of backward where buckets become ready, besides "after layer l" (l >= 0).
  static constexpr int64_t kAfterLmHead = -1, kAfterBackward = -2, kLayer0Mlp = -3,
                           kLayer0Qkv = -4;
  struct Bucket {
    int64_t begin = 0, end = 0;  // flat range of the gradient buffer
    int64_t after = 0;           // ready after: layer l's backward, or one of the k* points
    int64_t part = 0;            // ZeRO-1: (end - begin) / world, this rank's part
    int64_t shard_offset = 0;    // ZeRO-1: where this bucket's part starts in the shard
    cudaEvent_t ready = nullptr;
    cudaEvent_t cast = nullptr;  // bf16 communication: the bucket rounded, on the comm stream
    // AISCALE_CUDA_TIMING: end of the collective on NCCL's stream; sums over timed steps.
    cudaEvent_t done = nullptr;
    bool timed = false;
    double ready_ms = 0, comm_ms = 0, done_ms = 0;
    int64_t timed_steps = 0;
  };

  void plan_data_parallel() {
    Ppad_ = P_;
    S_ = P_;
    parallel::Communicator* c = options_.comm;
    if (!c || c->world() <= 1 || !c->device_stream()) return;  // the trainer all-reduces
    comm_ = c;
    world_ = c->world();
    rank_ = c->rank();
    dp_ = true;
    zero_ = options_.zero_stage == 1;
    overlap_ = options_.overlap;
    split_last_bucket_ = env_flag("AISCALE_CUDA_SPLIT_LAST_BUCKET", true);
    push_dres_ = env_flag("AISCALE_CUDA_PUSH_DRES", true);
    comm_t_ = options_.grad_comm;
    cast_on_comm_ = env_flag("AISCALE_CUDA_CAST_ON_COMM", true);
    const int64_t q = zero_ ? world_ : 1;
    const auto down = [q](int64_t x) { return x / q * q; };
    const auto up = [q](int64_t x) { return (x + q - 1) / q * q; };
    Ppad_ = (P_ + q - 1) / q * q;
    std::vector<Bucket> plan;
    if (!overlap_) {
      plan.push_back({0, Ppad_, kAfterBackward});
    } else {
      plan.push_back({0, down(layer_off(0)), kAfterLmHead});
      const int64_t target = std::max<int64_t>(1, int64_t(options_.bucket_mib * 1048576.0 / 4.0));
      int64_t end = Ppad_;
      for (int64_t l = L_ - 1; l >= 0; --l) {
        const int64_t begin = down(layer_off(l));
        if (l == 0 && split_last_bucket_) {
          // Layer 0's bucket is the one whose sum stays exposed after backward: cut it
          // where its parameters complete (the MLP and the attention projection's bias
          // after the second LayerNorm's backward; the attention projection and QKV after
          // QKV's weight gradient; the first LayerNorm at the end), so that only the last
          // few values wait. ZeRO-1 rounds these cuts up: the values moved go to the
          // later bucket, which is always complete by then.
          const int64_t lo = layer_off(0);
          const int64_t mlp = std::min(up(lo + lay_.proj_b), end);
          const int64_t qkv = std::min(up(lo + lay_.qkv_w), mlp);
          plan.push_back({mlp, end, kLayer0Mlp});
          plan.push_back({qkv, mlp, kLayer0Qkv});
          plan.push_back({begin, qkv, 0});
        } else if (end - begin >= target || l == 0) {
          plan.push_back({begin, end, l});
          end = begin;
        }
      }
    }
    int64_t offset = 0;
    for (Bucket& b : plan) {
      if (b.end <= b.begin) continue;
      b.part = zero_ ? (b.end - b.begin) / world_ : b.end - b.begin;
      b.shard_offset = offset;
      offset += b.part;
      AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&b.ready, timing_ ? cudaEventDefault : cudaEventDisableTiming));
      if (comm_t_ != DType::f32) AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&b.cast, cudaEventDisableTiming));
      if (timing_) AISCALE_CUDA_CHECK(cudaEventCreate(&b.done));
      buckets_.push_back(b);
    }
    if (zero_) S_ = Ppad_ / world_;
    for (cudaEvent_t* e : {&tokens_ready_, &comm_done_, &dres_ready_, &update_done_, &embed_done_})
      AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    // AISCALE_CUDA_COMM_THREAD=0 makes the calls on the model's thread (for measurements).
    comm_queue_ = std::make_unique<CommQueue>(device_, env_flag("AISCALE_CUDA_COMM_THREAD", true));
    if (verbose_) {
      std::fprintf(stderr, "[aiscale cuda] rank %d of %d: %zu gradient bucket(s)%s%s:", rank_,
                   world_, buckets_.size(), overlap_ ? " overlapped with backward" : "",
                   zero_ ? ", ZeRO-1" : "");
      for (const Bucket& b : buckets_)
        std::fprintf(stderr, " [%lld, %lld)", static_cast<long long>(b.begin),
                     static_cast<long long>(b.end));
      std::fprintf(stderr, "\n");
    }
  }

  cudaStream_t comm_stream() const { return static_cast<cudaStream_t>(comm_->device_stream()); }
  void* comm_at(int64_t i) const { return static_cast<char*>(comm_buf_) + i * int64_t(dtype_size(comm_t_)); }

  // Queues the collectives of the buckets complete at this point of backward.
  void send_buckets_ready_after(int64_t point) {
    for (Bucket& b : buckets_) {
      if (b.after != point) continue;
      const Bucket* bp = &b;
      // bf16 communication: rounded to bf16 on the communicator's stream, after the bucket
      // is ready (beside backward's kernels, not in their way; AISCALE_CUDA_CAST_ON_COMM=0:
      // on the model's stream, as before session 7), summed, widened back on the
      // communicator's stream (for ZeRO-1 only this rank's part, the only one it reads).
      const bool cast = comm_t_ != DType::f32;
      if (cast && !cast_on_comm_)
        cuda::cast_from_f32(comm_t_, comm_at(b.begin), grads_ + b.begin, b.end - b.begin, stream_);
      AISCALE_CUDA_CHECK(cudaEventRecord(b.ready, stream_));
      comm_queue_->post([this, bp] {  // two pointers: std::function stores them in place
        const bool cast = comm_t_ != DType::f32;
        void* data = cast ? comm_at(bp->begin) : static_cast<void*>(grads_ + bp->begin);
        cudaEvent_t after = bp->ready;
        if (cast && cast_on_comm_) {
          cudaStream_t cs = comm_stream();
          AISCALE_CUDA_CHECK(cudaStreamWaitEvent(cs, bp->ready, 0));
          cuda::cast_from_f32(comm_t_, data, grads_ + bp->begin, bp->end - bp->begin, cs);
          AISCALE_CUDA_CHECK(cudaEventRecord(bp->cast, cs));
          after = bp->cast;
        }
        if (zero_) comm_->reduce_scatter_sum_after(data, bp->part, comm_t_, after);
        else if (fused_norm_bucket(*bp))
          comm_->allreduce_sum_squares_after(data, bp->end - bp->begin, comm_t_, after,
                                             sumsq_dev_ + rank_);
        else comm_->allreduce_sum_after(data, bp->end - bp->begin, comm_t_, after);
        if (cast) {
          const int64_t from = zero_ ? bp->begin + rank_ * bp->part : bp->begin;
          const int64_t n = zero_ ? bp->part : bp->end - bp->begin;
          cuda::cast_to_f32(comm_t_, grads_ + from, comm_at(from), n, comm_stream());
        }
        if (bp->done) comm_->record(bp->done);
        if (bp == &buckets_.front()) comm_->record(embed_done_);
      });
      b.timed = timing_ && phases_recorded_ >= 2;
      if (fused_norm_bucket(b)) ++fused_posted_;
      comm_pending_ = true;
    }
  }

  // Adds its squares to this rank's share of the gradient norm as it is summed: every
  // bucket where the norm is fused, except (overlapped) the embeddings', to which the
  // embedding backward adds after their sum.
  bool fused_norm_bucket(const Bucket& b) const {
    return fused_norm_ && !(overlap_ && &b == &buckets_.front());
  }

  // The model thread's time in the communicator's calls (AISCALE_CUDA_TIMING).
  void drain_comm_queue() const {
    const auto start = std::chrono::steady_clock::now();
    comm_queue_->drain();
    if (timing_) host_comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Waits (bounded by the communicator's timeout) for the queued collectives.
  void finish_comm() const {
    if (!comm_pending_) return;
    drain_comm_queue();
    const auto start = std::chrono::steady_clock::now();
    comm_->wait();
    comm_pending_ = false;
    if (timing_) host_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // AISCALE_CUDA_TIMING: phase i of a training step starts (0 forward, 1 backward, 2 after
  // layer 0's backward, 3 after the embedding backward, 4 update, 5 its end).
  void mark_phase(int i, bool training = true) {
    if (!timing_) return;
    if (i == 0 && !training) {
      phases_recorded_ = 0;  // an evaluation or generation forward: not a training step
      return;
    }
    if (i != phases_recorded_) {  // out of order (e.g. a forward without backward): drop
      phases_recorded_ = 0;
      if (i != 0) return;
    }
    AISCALE_CUDA_CHECK(cudaEventRecord(phase_[i], stream_));
    phases_recorded_ = i + 1;
  }
  void collect_phases() {
    if (!timing_ || phases_recorded_ != 6) return;
    AISCALE_CUDA_CHECK(cudaEventSynchronize(phase_[5]));
    for (int i = 0; i < 5; ++i) {
      float ms = 0;
      AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, phase_[i], phase_[i + 1]));
      step_ms_[i].push_back(ms);
    }
    // The forward phase split where its kernels end (the loss read back).
    if (fwd_end_recorded_) {
      float kernels = 0, waiting = 0;
      AISCALE_CUDA_CHECK(cudaEventElapsedTime(&kernels, phase_[0], fwd_end_));
      AISCALE_CUDA_CHECK(cudaEventElapsedTime(&waiting, fwd_end_, phase_[1]));
      fwd_kernels_ms_.push_back(kernels);
      before_bwd_ms_.push_back(waiting);
    }
    fwd_end_recorded_ = false;
    // Per bucket: when it was ready (from the start of backward), and how long its
    // collective took from the later of its readiness and the previous collective's end.
    float prev_done = 0.0f;
    for (Bucket& b : buckets_) {
      if (!b.timed) continue;
      b.timed = false;
      float ready = 0.0f, done = 0.0f;
      AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ready, phase_[1], b.ready));
      AISCALE_CUDA_CHECK(cudaEventElapsedTime(&done, phase_[1], b.done));
      b.ready_ms += ready;
      b.comm_ms += done - std::max(ready, prev_done);
      b.done_ms += done;
      ++b.timed_steps;
      prev_done = done;
    }
    phases_recorded_ = 0;
  }

  // Flat-order working copy (type t) into the padded layout of work_.
  void copy_flat_to_work(const void* flat, cudaStream_t s) {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(work_, flat, size_t(V_ * C_) * es_, cudaMemcpyDeviceToDevice, s));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(at(work_, Vp_ * C_), static_cast<const char*>(flat) + V_ * C_ * int64_t(es_),
                                       size_t(P_ - V_ * C_) * es_, cudaMemcpyDeviceToDevice, s));
  }

  // ZeRO-1: this rank's parts of a whole host vector (P values) into a shard (S values).
  void scatter_to_shard(const float* full, float* shard) {
    AISCALE_CUDA_CHECK(cudaMemsetAsync(shard, 0, size_t(S_) * 4, stream_));
    for (const Bucket& b : buckets_) {
      const int64_t lo = b.begin + rank_ * b.part, n = std::min(lo + b.part, P_) - lo;
      if (n > 0)
        AISCALE_CUDA_CHECK(cudaMemcpyAsync(shard + b.shard_offset, full + lo, size_t(n) * 4,
                                           cudaMemcpyHostToDevice, stream_));
    }
  }

  // ZeRO-1: every rank's shard, gathered into a whole host vector (P values). Collective;
  // the gradient buffer (world x S = Ppad floats) is the scratch.
  void gather_shards(const float* shard, float* out) const {
    finish_comm();
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(grads_ + rank_ * S_, shard, size_t(S_) * 4,
                                       cudaMemcpyDeviceToDevice, stream_));
    AISCALE_CUDA_CHECK(cudaEventRecord(update_done_, stream_));
    comm_->allgather_after(grads_, S_ * 4, update_done_);
    comm_->wait();
    std::vector<float> all(static_cast<size_t>(Ppad_));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(all.data(), grads_, size_t(Ppad_) * 4, cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int64_t r = 0; r < world_; ++r)
      for (const Bucket& b : buckets_) {
        const int64_t lo = b.begin + r * b.part, n = std::min(lo + b.part, P_) - lo;
        if (n > 0)
          std::memcpy(out + lo, all.data() + r * S_ + b.shard_offset, size_t(n) * 4);
      }
  }

  int64_t bucket_capacity() const { return dp_ && overlap_ ? world_ * N_ : N_; }

  struct Acts {
    void *ln1, *qkv, *atty, *res_mid, *ln2, *fc_pre, *fc_gelu;  // (N, C), (N, 3C), ... of t
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;          // (N)
    float* lse;                                                // (B, NH, T)
  };

  void* at(void* base, int64_t elems) const { return static_cast<char*>(base) + elems * int64_t(es_); }
  // Working-copy (padded layout) parameter pointers.
  int64_t work_layer_off(int64_t l) const { return Vp_ * C_ + maxT_ * C_ + l * lay_.size; }
  const void* pw(int64_t l, int64_t off) const { return at(work_, work_layer_off(l) + off); }
  const void* wte_w() const { return work_; }
  const void* wpe_w() const { return at(work_, Vp_ * C_); }
  const void* lnf_w() const { return at(work_, work_layer_off(L_)); }
  const void* lnf_b() const { return at(work_, work_layer_off(L_) + C_); }
  // Gradient (flat layout) pointers.
  int64_t layer_off(int64_t l) const { return V_ * C_ + maxT_ * C_ + l * lay_.size; }
  int64_t lnf_w_off() const { return layer_off(L_); }
  float* g(int64_t off) const { return grads_ + off; }
  void* res(int64_t l) const { return residuals_[static_cast<size_t>(l)]; }

  size_t bucket_ints() const { return size_t(3 * bucket_capacity() + 1); }

  void check_tokens(const int32_t* x, const char* what) const {
    for (int64_t i = 0; i < N_; ++i)
      if (x[i] < 0 || x[i] >= V_)
        throw Error(std::string(what) + " id " + std::to_string(x[i]) + " at position " +
                    std::to_string(i) + " is outside the vocabulary 0.." + std::to_string(V_ - 1) +
                    ": the data does not match model.vocab_size");
  }

  void download(float* out, const float* src) const {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, src, size_t(P_) * 4, cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void upload(float* dst, const float* in) {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(dst, in, size_t(P_) * 4, cudaMemcpyHostToDevice, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void allocate() {
    const int64_t N = N_, C = C_, L = L_;
    const size_t e = es_;
    const bool rc = options_.recompute;
    ArenaPlan plan;
    struct Off {
      size_t ln1, qkv, atty, res_mid, ln2, fc_pre, fc_gelu, ln1_mean, ln1_rstd, ln2_mean,
          ln2_rstd, lse;
    };
    // Master weights and moments: S_ values (P, or this rank's ZeRO-1 shard); gradients
    // Ppad_ (P rounded up to a multiple of the ZeRO-1 world size, the tail zero).
    const size_t o_master = plan.add(size_t(S_) * 4), o_grads = plan.add(size_t(Ppad_) * 4);
    const size_t o_m = plan.add(size_t(S_) * 4), o_v = plan.add(size_t(S_) * 4);
    const size_t o_work = plan.add(size_t(Pw_) * e);
    const size_t o_ws = plan.add(Gemm::kWorkspaceBytes);
    std::vector<size_t> o_res;
    for (int64_t l = 0; l <= L; ++l) o_res.push_back(plan.add(size_t(N * C) * e));
    const size_t shared_ln1 = rc ? plan.add(size_t(N * C) * e) : 0;
    const size_t shared_ln2 = rc ? plan.add(size_t(N * C) * e) : 0;
    const size_t shared_gelu = rc ? plan.add(size_t(N * 4 * C) * e) : 0;
    std::vector<Off> off(static_cast<size_t>(L));
    for (auto& x : off) {
      x.ln1 = rc ? shared_ln1 : plan.add(size_t(N * C) * e);
      x.qkv = plan.add(size_t(N * 3 * C) * e);
      x.atty = plan.add(size_t(N * C) * e);
      x.res_mid = plan.add(size_t(N * C) * e);
      x.ln2 = rc ? shared_ln2 : plan.add(size_t(N * C) * e);
      x.fc_pre = plan.add(size_t(N * 4 * C) * e);
      x.fc_gelu = rc ? shared_gelu : plan.add(size_t(N * 4 * C) * e);
      x.ln1_mean = plan.add(size_t(N) * 4);
      x.ln1_rstd = plan.add(size_t(N) * 4);
      x.ln2_mean = plan.add(size_t(N) * 4);
      x.ln2_rstd = plan.add(size_t(N) * 4);
      x.lse = plan.add(size_t(B_ * NH_ * T_) * 4);
    }
    const size_t o_lnf = plan.add(size_t(N * C) * e);
    const size_t o_lnf_mean = plan.add(size_t(N) * 4), o_lnf_rstd = plan.add(size_t(N) * 4);
    const size_t o_logits = plan.add(size_t(N * Vp_) * e);
    const size_t o_losses = plan.add(size_t(N) * 4), o_loss = plan.add(4);
    const size_t o_dres = plan.add(size_t(N * C) * e), o_dln = plan.add(size_t(N * C) * e);
    const size_t o_datty = plan.add(size_t(N * C) * e);
    const size_t o_dqkv = plan.add(size_t(N * 3 * C) * e);
    const size_t o_dfc = plan.add(size_t(N * 4 * C) * e);
    const size_t o_dq = plan.add(size_t(N * C) * 4);
    const size_t o_delta = plan.add(size_t(B_ * NH_ * T_) * 4);
    const size_t o_cudnn_ws =
        plan.add(std::max<size_t>(16, cudnn_attention_ ? cudnn_attention_->workspace_bytes() : 0));
    const size_t o_bias_scratch = plan.add(cuda::bias_grad_scratch_floats(4 * C) * 4);
    const size_t o_bias_tmp = plan.add(size_t(4 * C) * 4);
    const size_t o_ln_scratch = plan.add(cuda::layernorm_backward_scratch_floats(N, C) * 4);
    const size_t o_sumsq_scratch = plan.add(cuda::sum_squares_scratch_doubles() * 8);
    // Per bucket (ZeRO-1) or per rank and the embeddings (the fused norm).
    const size_t n_sumsq = std::max<size_t>({1, buckets_.size(), size_t(world_) + 1});
    const size_t o_sumsq = plan.add(8 * n_sumsq);
    const size_t o_tokens = plan.add(size_t(2 * N) * 4);
    // Data parallelism: every rank's tokens and d(res0) (overlapped), the flat working copy
    // (ZeRO-1). The last two live in the logits buffer when it is large enough: d(res0) is
    // gathered after the LM head's backward has read dlogits (every rank's: NCCL's
    // all-gather and the copy engines' handshake wait for each rank's end of backward), the
    // working copy between the update and the next forward. Not so d(res0) pushed by the
    // copy engines: a rank pushes its part into the peers' buffers as soon as its own
    // backward ends, which may be before a slower peer's LM head has read its dlogits; it
    // gets a buffer of its own (its readers, the embedding backwards, are done before the
    // step's host-level loss all-reduce, which every rank passes before its next push).
    const bool gathered = dp_ && overlap_;
    const size_t logits_bytes = size_t(N * Vp_) * e;
    const size_t dres_all_bytes = gathered ? size_t(world_ * N * C) * e : 0;
    const size_t gather_bytes = zero_ ? size_t(Ppad_) * e : 0;
    // bf16 gradient communication: the buckets' bf16 copies, alive from the LM head's
    // backward (after it has read dlogits) to the end of backward, beside d(res0).
    const size_t comm_buf_bytes =
        dp_ && comm_t_ != DType::f32 ? (size_t(Ppad_) * dtype_size(comm_t_) + 255) / 256 * 256 : 0;
    const bool dres_pushed = push_dres_ && options_.grad_transport == "copy-engine";
    const bool dres_in_logits = dres_all_bytes && !dres_pushed && comm_buf_bytes + dres_all_bytes <= logits_bytes;
    const bool comm_buf_in_logits =
        comm_buf_bytes && comm_buf_bytes + (dres_in_logits ? dres_all_bytes : 0) <= logits_bytes;
    const size_t o_tokens_all = gathered ? plan.add(size_t(world_ * N) * 4) : 0;
    const size_t o_comm_buf = comm_buf_bytes && !comm_buf_in_logits ? plan.add(comm_buf_bytes) : 0;
    const size_t o_dres_all = dres_all_bytes && !dres_in_logits ? plan.add(dres_all_bytes) : 0;
    const size_t o_gather = gather_bytes > logits_bytes ? plan.add(gather_bytes) : 0;
    const size_t o_buckets = plan.add(bucket_ints() * 4);
    const size_t o_logits_row = plan.add(size_t(Vp_) * 4);

    arena_bytes_ = plan.total;
    cudaError_t err = cudaMalloc(&arena_, arena_bytes_);
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error("GPU out of memory: the model needs " + std::to_string(arena_bytes_ >> 20) +
                  " MiB, " + std::to_string(free_b >> 20) +
                  " MiB are free: lower the batch size or enable recomputation");
    }
    char* base = static_cast<char*>(arena_);
    auto F = [&](size_t o) { return reinterpret_cast<float*>(base + o); };
    auto X = [&](size_t o) { return static_cast<void*>(base + o); };
    master_ = F(o_master);
    grads_ = F(o_grads);
    m_ = F(o_m);
    v_ = F(o_v);
    work_ = X(o_work);
    gemm_workspace_ = X(o_ws);
    for (size_t o : o_res) residuals_.push_back(X(o));
    acts_.resize(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) {
      const Off& x = off[static_cast<size_t>(l)];
      acts_[static_cast<size_t>(l)] =
          Acts{X(x.ln1),      X(x.qkv),      X(x.atty),     X(x.res_mid),
               X(x.ln2),      X(x.fc_pre),   X(x.fc_gelu),  F(x.ln1_mean),
               F(x.ln1_rstd), F(x.ln2_mean), F(x.ln2_rstd), F(x.lse)};
    }
    lnf_ = X(o_lnf);
    lnf_mean_ = F(o_lnf_mean);
    lnf_rstd_ = F(o_lnf_rstd);
    logits_ = X(o_logits);
    losses_ = F(o_losses);
    loss_dev_ = F(o_loss);
    dres_ = X(o_dres);
    dln_ = X(o_dln);
    datty_ = X(o_datty);
    dqkv_ = X(o_dqkv);
    dfc_ = X(o_dfc);
    dq_accum_ = F(o_dq);
    delta_ = F(o_delta);
    cudnn_workspace_ = base + o_cudnn_ws;
    bias_scratch_ = F(o_bias_scratch);
    bias_tmp_ = F(o_bias_tmp);
    ln_scratch_ = F(o_ln_scratch);
    sumsq_scratch_ = reinterpret_cast<double*>(base + o_sumsq_scratch);
    sumsq_dev_ = reinterpret_cast<double*>(base + o_sumsq);
    d_tokens_ = reinterpret_cast<int32_t*>(base + o_tokens);
    if (gathered) tokens_all_ = reinterpret_cast<int32_t*>(base + o_tokens_all);
    if (comm_buf_bytes) comm_buf_ = comm_buf_in_logits ? logits_ : X(o_comm_buf);
    if (dres_all_bytes)
      dres_all_ = dres_in_logits ? static_cast<char*>(logits_) + comm_buf_bytes : X(o_dres_all);
    if (zero_) gather_ = o_gather ? X(o_gather) : logits_;
    d_buckets_ = reinterpret_cast<int32_t*>(base + o_buckets);
    logits_row_ = F(o_logits_row);

    // Pinned host staging: tokens + targets, buckets, every rank's tokens, sums of squares,
    // loss.
    const int64_t Nb = bucket_capacity();
    const size_t tokens_all_bytes = gathered ? size_t(world_ * N) * 4 : 0;
    const size_t host_bytes =
        size_t(2 * N) * 4 + bucket_ints() * 4 + tokens_all_bytes + 8 * n_sumsq + 64;
    AISCALE_CUDA_CHECK(cudaMallocHost(&host_staging_, host_bytes));
    char* h = static_cast<char*>(host_staging_);
    h_tokens_ = reinterpret_cast<int32_t*>(h);
    h_buckets_ = reinterpret_cast<int32_t*>(h + size_t(2 * N) * 4);
    h_unique_ = h_buckets_;
    h_offsets_ = h_buckets_ + Nb;
    h_positions_ = h_buckets_ + 2 * Nb + 1;
    char* tail = h + size_t(2 * N) * 4 + bucket_ints() * 4;
    if (gathered) {
      h_tokens_all_ = reinterpret_cast<int32_t*>(tail);
      tail += tokens_all_bytes;
    }
    tail += (8 - reinterpret_cast<uintptr_t>(tail) % 8) % 8;
    h_sumsq_ = reinterpret_cast<double*>(tail);
    h_loss_ = reinterpret_cast<float*>(tail + 8 * n_sumsq);
    bucket_counts_.reserve(static_cast<size_t>(V_));
  }

  GptConfig config_;
  GptRunOptions options_;
  DType t_;
  size_t es_;
  int64_t B_, T_, C_, NH_, L_, V_, Vp_, maxT_, N_, P_ = 0, Pw_ = 0;
  LayerOffsets lay_;
  AttentionImpl attention_impl_ = AttentionImpl::automatic;
  LinearOptions linear_;
  bool fused_xent_ = true, verbose_ = false, printed_plans_ = false;
  bool lm_head_padded_dw_ = false, autotune_ = true;

  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t loss_ready_ = nullptr, buckets_sent_ = nullptr;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  void* gemm_workspace_ = nullptr;
  std::unique_ptr<Gemm> gemm_;

  float *master_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  void* work_ = nullptr;
  std::vector<void*> residuals_;  // L + 1 buffers (N, C): embedding output, block outputs
  std::vector<Acts> acts_;
  void* lnf_ = nullptr;
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
  void* logits_ = nullptr;  // (N, Vp): logits, or dlogits after a fused forward
  float *losses_ = nullptr, *loss_dev_ = nullptr;
  void *dres_ = nullptr, *dln_ = nullptr, *datty_ = nullptr, *dqkv_ = nullptr, *dfc_ = nullptr;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;  // AISCALE_CUDA_ATTENTION=cudnn / auto
  void* cudnn_workspace_ = nullptr;
  float *dq_accum_ = nullptr, *delta_ = nullptr, *bias_scratch_ = nullptr, *bias_tmp_ = nullptr;
  float *ln_scratch_ = nullptr, *logits_row_ = nullptr;
  double *sumsq_scratch_ = nullptr, *sumsq_dev_ = nullptr;
  int32_t *d_tokens_ = nullptr, *d_buckets_ = nullptr;

  void* host_staging_ = nullptr;
  int32_t *h_tokens_ = nullptr, *h_buckets_ = nullptr, *h_unique_ = nullptr,
          *h_offsets_ = nullptr, *h_positions_ = nullptr;
  float* h_loss_ = nullptr;
  double* h_sumsq_ = nullptr;
  std::vector<int32_t> bucket_counts_;
  int64_t num_unique_ = 0;

  // Data parallelism (plan_data_parallel).
  parallel::Communicator* comm_ = nullptr;
  std::unique_ptr<parallel::Communicator> copy_engine_;  // wraps options_.comm when used
  int64_t world_ = 1, rank_ = 0;
  int64_t Ppad_ = 0, S_ = 0;  // gradient buffer length, master/moment (shard) length
  bool dp_ = false, zero_ = false, overlap_ = true, split_last_bucket_ = true, push_dres_ = true;
  // The gradient norm from the buckets' sums (fused_norm_bucket): sumsq_dev_[r] holds rank
  // r's share, sumsq_dev_[world] the embeddings'.
  bool fused_norm_ = false;
  int64_t n_fused_buckets_ = 0, fused_posted_ = 0;
  bool sync_ = true;        // set_gradient_sync
  bool sync_step_ = false;  // the current forward/backward synchronises
  mutable bool comm_pending_ = false;
  // AISCALE_CUDA_TIMING
  bool timing_ = false;
  cudaEvent_t phase_[6] = {};
  int phases_recorded_ = 0;
  // Per timed step (ms), for the means and medians printed at exit: the five phases; the
  // forward split at the end of its kernels (fwd_end_); and per forward with targets the
  // host's time in its parts (launches, staging and token wait, token buckets, loss wait).
  std::vector<double> step_ms_[5];
  cudaEvent_t fwd_end_ = nullptr;
  bool fwd_end_recorded_ = false;
  std::vector<double> fwd_kernels_ms_, before_bwd_ms_;
  std::vector<double> host_laps_[4];
  mutable double host_comm_s_ = 0;
  mutable double host_wait_s_ = 0;
  std::vector<Bucket> buckets_;
  std::unique_ptr<CommQueue> comm_queue_;
  cudaEvent_t tokens_ready_ = nullptr, comm_done_ = nullptr, dres_ready_ = nullptr,
              update_done_ = nullptr, embed_done_ = nullptr;  // embed_done_: wte/wpe's bucket summed
  int32_t *tokens_all_ = nullptr, *h_tokens_all_ = nullptr;
  void* dres_all_ = nullptr;  // (world x N, C) of t: every rank's d(res0)
  void* gather_ = nullptr;    // (Ppad) of t: flat working copy (ZeRO-1)
  DType comm_t_ = DType::f32;  // type the gradient buckets are summed in
  bool cast_on_comm_ = true;   // AISCALE_CUDA_CAST_ON_COMM
  void* comm_buf_ = nullptr;   // (Ppad) of comm_t_ when that is not f32

  bool has_targets_ = false, forward_done_ = false;
  LogitsState logits_state_ = LogitsState::consumed;
  float grad_multiplier_hint_ = 1.0f;  // dlogits of a fused forward are scaled by this
  float dlogits_multiplier_ = 1.0f;
};

}  // namespace

std::unique_ptr<GptModel> create_gpt_cuda(const GptConfig& c, const GptRunOptions& o,
                                          const std::vector<float>& init_params) {
  return std::make_unique<GptCuda>(c, o, init_params);
}

}  // namespace detail
}  // namespace aiscale::nn
