// The CUDA GPT model's class, shared by its source files: gpt_cuda.cu (construction,
// warm-up, forward, logits), gpt_cuda_backward.cu (backward), gpt_cuda_state.cu (the
// optimiser step, gradients), gpt_cuda_stream.cu (the state checkpoints read and write, a
// range at a time, and the initial weights) and
// gpt_cuda_pp.cu (pipeline stages), gpt_cuda_llama.cu (the llama family's layers and head).
// What the
// model does, and its precision, memory and fusions, are described in gpt_cuda.cu.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/nn/models/gpt_cuda_memory.cuh"
#include "aiscale/nn/models/gpt_cuda_pp.cuh"
#include "aiscale/nn/models/gpt_cuda_tp.cuh"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/nn/models/gpt_zero3.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/ops/cuda/fp8.cuh"
#include "aiscale/optim/zero1.cuh"
#include "aiscale/parallel/data_parallel/reducer.cuh"
#include "aiscale/profile/gpu_op_recorder.cuh"
#include "aiscale/profile/step_timer.cuh"

namespace aiscale::nn::detail {

using cuda::AttentionImpl;
using cuda::Gemm;
using cuda::LinearOptions;
using P = GptBlockParam;

class GptCuda final : public GptModel, private GptCudaMemory {
 public:
  // The initial weights are the seed's (o.seed: gpt_init_ranges), as on every backend.
  GptCuda(const GptConfig& c, const GptRunOptions& o, const GptCudaSwitches& sw,
          parallel::Communicator* tensor_group,
          parallel::Communicator* data_group, parallel::Communicator* pipeline_group,
          const GptCudaPipelinePlan& plan);
  ~GptCuda() override;

  const GptConfig& config() const override { return config_; }
  const GptRunOptions& options() const override { return options_; }
  std::string device_name() const override { return device_name_; }
  std::string attention_kernels() const override {
    if (cudnn_attention_) return cudnn_attention_->describe();
    return cuda::attention_flash_supported(t_, C_ / NH_) && attention_impl_ != AttentionImpl::simple
               ? "flash"
               : "simple";
  }

  std::string gradient_transport() const override {
    if (reducer_) return reducer_->transport_name();
    if (!options_.comm || options_.comm->world() <= 1) return "none";
    return options_.comm->on_device() ? "nccl" : "host";  // MPI or TCP: staged through host memory
  }

  // One forward + backward on random tokens before the first real step: loads every
  // kernel and, with autotuning on, lets each GEMM time cuBLASLt's candidate algorithms
  // on the real buffers (some accumulate into the gradients, which are zeroed after).
  // Parameters and optimizer state are untouched.
  void warm_up();

  // With pipeline stages (gpt_cuda_pp.cuh) forward is the stages' evaluation pass over the
  // micro-batches and training runs in forward_backward (the schedule); backward alone is
  // refused. Without, the batch's pass on this GPU.
  // (gpt_cuda_pp.cu)
  float forward(const int32_t* inputs, const int32_t* targets) override;
  void backward(float grad_multiplier) override;
  float forward_backward(const int32_t* inputs, const int32_t* targets,
                         float grad_multiplier) override;
  bool pipelined() const override { return pp_ != nullptr; }
  double pipeline_wait_s() const override { return wait_s_; }
  void set_profiler(profile::OpProfiler* p) override;
  void zero_grad() override;
  double grad_sum_squares() override;
  void update(const ops::AdamWParams& hp) override;
  void logits_at(int64_t b, int64_t t, float* out) override;

  // The state a range at a time (gpt_cuda_stream.cu), in every layout: with ZeRO-1, 2 or 3
  // (sharded), tensor slices or pipeline stages the getters are collective (every rank calls
  // them with the same ranges; collective_state()); the setters are local. The whole-vector
  // methods are one range of the whole model.
  bool streams_state() const override { return true; }
  void get_params_range(int64_t begin, int64_t count, float* out) const override;
  void set_params_range(int64_t begin, int64_t count, const float* in) override;
  void get_optimizer_state_range(int k, int64_t begin, int64_t count, float* out) const override;
  void set_optimizer_state_range(int k, int64_t begin, int64_t count, const float* in) override;
  void get_params(float* out) const override;
  void set_params(const float* in) override;
  void get_grads(float* out) const override;
  void set_grads(const float* in) override;
  void get_optimizer_state(float* m, float* v) const override;
  void set_optimizer_state(const float* m, const float* v) override;
  float* grad_buffer() override { return grads_; }
  float* param_buffer() override { return master_; }  // ZeRO-1: this rank's shard
  size_t memory_bytes() const override {
    return arena_bytes_ + (pp_ ? pp_->bytes() : 0) + (fp8_ ? fp8_->bytes() : 0);
  }
  size_t optimizer_state_bytes() const override { return size_t(3 * 4) * size_t(S_); }
  // Tensor parallelism: within a tensor group the gradients need no exchange (split tensors
  // are each rank's own, replicated ones equal), and between data-parallel copies this
  // model sums them itself (gpt_cuda_tp.cuh), so the trainer must not sum them.
  // Pipeline stages sum their gradients over the job's ranks themselves (gpt_cuda_pp.cuh).
  bool data_parallel() const override {
    return reducer_ != nullptr || (zero3_ && world_ > 1) || tp_ != nullptr || pipeline_ != nullptr;
  }
  void set_gradient_sync(bool on) override {
    if (reducer_) reducer_->set_sync(on);
    tp_sync_ = on;
  }
  // Pipeline stages hold their own layers: a checkpoint gathers them from every stage.
  bool collective_state() const override {
    return zero1_ != nullptr || (zero3_ && world_ > 1) || tp_ != nullptr || pipeline_ != nullptr;
  }

 private:
  enum class LogitsState { valid, gradient, consumed };

  // The data-parallel reducer subscribes to this model's gradients (null without data
  // parallelism on the device); ZeRO-1's optimiser side shards along its buckets. With
  // ZeRO-3 there is no reducer: Zero3 gathers the parameters and reduce-scatters
  // the gradients unit by unit. Under tensor parallelism there is none either: the data
  // group's sums are tp_'s, with ZeRO-1 zero1_'s reduce-scatter over the data group, with
  // ZeRO-2/3 zero3_'s over it.
  void subscribe_reducer(bool fused_norm);

  GptCudaSizes sizes() const;

  // The batch's forward and backward on this GPU (no pipeline stages; the warm-up's).
  float forward_batch(const int32_t* inputs, const int32_t* targets);
  void backward_batch(float grad_multiplier);
  // Pieces of both (gpt_cuda.cu, gpt_cuda_backward.cu), shared with the pipeline's passes.
  void layers_forward(int64_t l0, int64_t l1);
  // Layer l's forward: res(l) in, res(l + 1) and the layer's activations out (the layer's
  // parameters in place: under ZeRO-3 gathered by use_layer).
  void layer_forward(int64_t l);
  // The llama family (gpt_cuda_llama.cu): its layer (RMSNorm, rotary Q and K, grouped-query
  // attention, SwiGLU), its layers' backward, its attention, and its head (the final RMSNorm
  // and the LM head, tied or its own weight).
  void llama_layer_forward(int64_t l);
  void llama_layers_backward(int64_t l0, int64_t l1);
  void llama_attention_forward(Acts& a);
  void llama_attention_backward(Acts& a);
  void llama_head_forward();
  void llama_head_backward(float alpha);
  // Refuses the layouts the llama family does not run on GPUs yet, naming their keys.
  void llama_check_layout(bool tensor, bool pipeline) const;
  // Full activation recomputation (options_.recompute_layers): the layer whose
  // activations the one shared set holds (-1: none, or partly overwritten).
  int64_t acts_layer_ = -1;
  // train.recompute's LayerNorm and GELU outputs: moot beside whole-layer recomputation.
  bool recompute_norms() const { return options_.recompute && !options_.recompute_layers; }
  void head_forward();
  void loss_forward(const int32_t* d_targets, float grad_multiplier, float* loss);
  void softmax_xent(const int32_t* d_targets, float dscale, bool write_grad);
  void head_backward(float grad_multiplier);
  void layers_backward(int64_t l0, int64_t l1, bool bias_from_dres);
  // Layer l's backward begins (GPT-2's and the llama family's): its parameters in use, under
  // ZeRO-3 the gradient buffer of the layer below prepared while this one computes, its
  // forward recomputed where only its input was kept. Returns its activations.
  Acts& begin_layer_backward(int64_t l);
  void layers_backward_sp(int64_t l0, int64_t l1);
  void attention_qkv_backward(int64_t l);
  void mlp_backward(int64_t l, const void* dout, bool proj_bias);
  // The linear layers of a block, which name their FP8 scaling state (fp8_id).
  enum class Linear { qkv = 0, proj = 1, fc = 2, fcproj = 3 };
  int64_t fp8_id(int64_t l, Linear j) const { return 4 * l + static_cast<int64_t>(j); }
  // Linear j of layer l forward over the N_ rows (cuda::linear_forward's arguments): in FP8
  // under train.precision = "fp8" where the shapes allow, else in the activations' type.
  void linear_forward(int64_t l, Linear j, void* out, void* pre_gelu, const void* inp,
                      const void* weight, const void* bias, const void* residual, int64_t C,
                      int64_t OC);
  // Linear j of layer l backward over the N_ rows, C inputs and OC outputs: dweight +=
  // dout^T inp (and, with dbias, dbias += dout's column sums); then `ready_point`'s gradients
  // reported where one is given; then dinp = dout W (with gelu_pre: times gelu'(gelu_pre),
  // and dbias_gelu (+=) the column sums of that, the bias gradient of the GELU's layer).
  void linear_backward(int64_t l, Linear j, int64_t C, int64_t OC, float* dweight, float* dbias,
                       const void* weight, const void* dout, const void* inp, void* dinp,
                       std::optional<int> ready_point = std::nullopt,
                       const void* gelu_pre = nullptr, float* dbias_gelu = nullptr);
  // Pipeline stages (gpt_cuda_pp.cu).
  void pipeline_take_batch(const int32_t* inputs, const int32_t* targets);
  void stage_compute(int m, float grad_multiplier, bool fresh, int loss_slot);
  void stage_forward(int m, float grad_multiplier, bool training);
  void stage_backward(int m, float grad_multiplier);
  float pipeline_finish();
  float pipeline_forward_backward(const int32_t* inputs, const int32_t* targets, float grad_multiplier);
  float pipeline_forward(const int32_t* inputs, const int32_t* targets);

  // Backward has queued the work that completes the gradients of `point` on the stream.
  void ready(int point) {
    if (reducer_) reducer_->gradients_ready(point, stream_);
  }
  // Waits (bounded) for the reducer's collectives (e.g. ZeRO-1's all-gather of the weights)
  // and the tensor group's all-reduces.
  void finish_comm() const {
    if (reducer_) reducer_->finish();
    if (tp_) tp_->finish();
  }
  // Tensor parallelism: a row-parallel layer's bias and residual, added by rank 0 only (the
  // others write partial sums), and the sum over the tensor ranks of (N, C) values
  // (a row-parallel output forward, a column-parallel input gradient backward).
  const void* row_add(const void* p) const { return !tp_ || tp_->adds_bias() ? p : nullptr; }
  void tp_sum(void* x) {
    if (tp_) tp_->allreduce(x, N_ * C_);
  }
  // Sequence parallelism (sp_): this rank's rows of the residual stream are rows
  // [rank * n, (rank + 1) * n) of the micro-batch's N (n = N / tp). The LayerNorms run on
  // them; their outputs are all-gathered for the column-parallel layers, and the
  // row-parallel layers' partial outputs (N, C) are reduce-scattered to them. Backward
  // mirrors it; the LayerNorms' weight gradients, taken over each rank's rows, are summed
  // over the tensor ranks after the last micro-step (sp_sum_norm_grads). The embeddings,
  // the final LayerNorm and the LM head run on all N rows as without it.
  bool sp_ = false;
  int64_t sp_n() const { return N_ / shard_.tp(); }
  // This rank's block of an (N, C) buffer.
  void* sp_block(void* full) const { return at(full, int64_t(shard_.rank()) * sp_n() * C_); }
  // `local` (n rows) into its block of `full`, then every rank's block gathered there.
  void sp_gather(void* full, const void* local);
  // The sum over the tensor ranks of `full`'s (N, C) partial values: this rank's block of
  // the sums, returned (in place; the other blocks are left undefined).
  void* sp_reduce(void* full);
  void sp_sum_norm_grads();
  // Rows of the residual stream on this rank, and of what pipeline stages pass on.
  int64_t boundary_rows() const { return sp_ ? sp_n() : N_; }
  void embedding_forward(const int32_t* d_inputs);
  // The final LayerNorm's input: the gathered last residual under sequence parallelism.
  void* head_in() const { return sp_ ? sp_final_ : res(le()); }
  // --profile: the op now starting on the model's stream (nullptr: the last one ended).
  void prof_op(const char* name, double flops = 0) {
    if (op_recorder_) op_recorder_->mark(name, flops);
  }
  // AISCALE_CUDA_TIMING.
  void mark(int phase, bool training = true) {
    if (timer_) timer_->mark(phase, stream_, training);
  }
  void lap(int part) {
    if (timer_) timer_->lap(part);
  }
  void collect_phases() {
    if (!timer_ || !timer_->step_complete()) return;
    timer_->collect();
    if (reducer_) reducer_->collect_bucket_times(timer_->backward_start());
    timer_->finish_collect();
  }

  // Flat-order working copy (type t) into the padded layout of work_.
  void copy_flat_to_work(const void* flat, cudaStream_t s);

  void* at(void* base, int64_t elems) const { return static_cast<char*>(base) + elems * int64_t(es_); }
  // Working-copy (padded layout) parameter pointers. With ZeRO-3 a layer's parameters
  // are those gathered for the layer now computing (use_layer), the embeddings and ln_f
  // those gathered for the step.
  int64_t work_layer_off(int64_t l) const { return shard_.layer_begin(l) + (Vp_ - V_) * C_; }
  const void* pw(int64_t l, int64_t off) const {
    return zero3_ ? at(const_cast<void*>(layer_w_), off) : at(work_, work_layer_off(l) + off);
  }
  const void* wte_w() const { return zero3_ ? zero3_->wte() : work_; }
  const void* wpe_w() const {
    if (llama_) return nullptr;  // rotary positions
    return zero3_ ? zero3_->at_resident(Vp_ * C_) : at(work_, Vp_ * C_);
  }
  // The LM head's weight: the token embedding (tied), or the llama family's own lm_head
  // (after the final norm; its Vp - V padded rows are the working copy's zero tail; under
  // ZeRO-2/3 it follows the final norm in the gathered resident unit, and Vp == V).
  const void* head_w() const {
    if (lm_head_off_ < 0) return wte_w();
    if (zero3_) return zero3_->at_resident(zero3_->shards().resident_lnf() + C_);
    return at(work_, lm_head_off_ + (Vp_ - V_) * C_);
  }
  float* g_head() const {
    if (lm_head_off_ < 0) return g_wte();
    if (zero3_) return zero3_->resident_grads() + zero3_->shards().resident_lnf() + C_;
    return g(lm_head_off_);
  }
  const void* lnf_w() const {
    return zero3_ ? zero3_->at_resident(zero3_->shards().resident_lnf())
                  : at(work_, shard_.lnf_w() + (Vp_ - V_) * C_);
  }
  const void* lnf_b() const { return at(const_cast<void*>(lnf_w()), C_); }
  // ZeRO-3: layer l is about to compute in direction dir (+1 forward, -1 backward).
  void use_layer(int64_t l, int dir) {
    if (zero3_) layer_w_ = zero3_->layer(l, dir);
  }
  // Gradient pointers: the flat buffer, or with ZeRO-3 the layer's gradient buffer and
  // the resident one (wte with its padded rows, wpe, ln_f).
  // (Offsets in this rank's local buffers: with tensor parallelism its slices, else the
  // GPT layout itself.)
  int64_t layer_off(int64_t l) const { return shard_.layer_begin(l); }
  int64_t in(P p) const { return shard_.in_layer(p); }
  int64_t lnf_w_off() const { return shard_.lnf_w(); }
  float* g(int64_t off) const { return grads_ + off; }
  float* gl(int64_t l, P p) const {
    return zero3_ ? zero3_->layer_grads(l) + in(p) : g(layer_off(l) + in(p));
  }
  float* g_wte() const { return zero3_ ? zero3_->resident_grads() : grads_; }
  float* g_wpe() const {
    if (llama_) return nullptr;
    return zero3_ ? zero3_->resident_grads() + Vp_ * C_ : g(shard_.wpe());
  }
  float* g_lnf(int64_t k) const {  // k = 0: weight, 1: bias
    return zero3_ ? zero3_->resident_grads() + zero3_->shards().resident_lnf() + k * C_
                  : g(lnf_w_off() + k * C_);
  }
  void* res(int64_t l) const { return residuals_[static_cast<size_t>(l)]; }

  void check_tokens(const int32_t* x, const char* what) const;

  // The state a range at a time (gpt_cuda_stream.cu). k: 0 the (master) parameters, 1 m,
  // 2 v. Where state k lives on this rank: its local buffer (device), or its shard (ZeRO-1
  // along the buckets, ZeRO-2/3 along the units, in pinned host memory when offloaded),
  // with the shard's length; writing the parameters under ZeRO-1 fills the whole local
  // vector in grads_ instead.
  enum class Sharding { none, zero1, zero3 };
  struct StateBuffer {
    float* base = nullptr;
    bool on_host = false;
    Sharding sharding = Sharding::none;
    int64_t size = 0;
  };
  StateBuffer state_buffer(int k, bool writing) const;
  // The data-parallel group the state is sharded over (null: not sharded, or one rank).
  parallel::Communicator* shard_group() const;
  // fn(local, index, n) for the runs of local positions [local, local + n) held in `s`.
  void held_runs(const StateBuffer& s, int64_t local, int64_t n,
                 const std::function<void(int64_t, int64_t, int64_t)>& fn) const;
  // Copies state k's values of flat range [begin, begin + count) that this rank holds
  // between `host` (the range) and its buffer, of the tensors selected (all, or the
  // replicated or split ones), noting the host runs in `copied` where given. Reading skips
  // the embeddings and the final norm on pipeline stages after the first.
  static constexpr int kAllTensors = 0, kReplicatedTensors = 1, kSplitTensors = 2;
  void copy_range(int k, int64_t begin, int64_t count, float* host, bool to_host, int tensors,
                  std::vector<std::pair<int64_t, int64_t>>* copied) const;
  // The range summed over the ranks that share it (collective when collective_state()).
  void read_range(int k, int64_t begin, int64_t count, float* out) const;
  // Writing: zero the buffer, the ranges in ascending order, and after the parameters'
  // last range the working copy (and ZeRO-1's master shards) from them.
  void begin_write(int k);
  void write_values(int k, int64_t begin, int64_t count, const float* in);
  void end_params_write();
  void set_range(int k, int64_t begin, int64_t count, const float* in);
  // The seed's initial weights (gpt_init_ranges), a range at a time.
  void init_params();
  int64_t next_write_[3] = {0, 0, 0};
  mutable uint64_t replicated_hash_ = 0;  // tensor parallelism: the replicated parameters'

  // dp x tp with ZeRO-2/3: this rank's slices of a whole vector (host; set_grads).
  std::vector<float> local_part(const float* full) const;

  void download(float* out, const float* src) const;
  void upload(float* dst, const float* in);
  // Pipeline stages (the gradients' whole vectors): a local vector (device, shard_ order)
  // into the whole model's (host, every rank; collective over the pipeline group), and a
  // whole vector's part for this stage into a local one.
  void stage_gather(const float* local_dev, float* out) const;
  void stage_scatter(const float* in, float* local_dev);
  // A whole vector holding this stage's values (zeros elsewhere) summed over the stages,
  // the embeddings and the final norm taken from stage 0 (collective over the pipeline).
  void stage_sum(float* full) const;


  GptConfig config_;
  GptRunOptions options_;
  GptLayout layout_;
  // This rank's parameters: its tensor-parallel slices, or a pipeline stage's layers with
  // the embeddings and the final norm (the GPT layout with one rank and one stage).
  GptShardLayout shard_;
  DType t_;
  size_t es_;
  // V_: the token embedding's rows in the master weights (the vocabulary, or this tensor
  // rank's slice of it with its padding rows), Vp_: in the working copy and the logits (the
  // vocabulary padded to 128 rows, or the slice); the real rows are shard_.vocab_rows().
  int64_t B_, T_, C_, NH_, L_, V_, Vp_, maxT_, N_, P_ = 0, Pw_ = 0;  // P_: local values
  // This tensor rank's attention width, heads and MLP width (C, NH, 4C with one rank; the
  // llama family's F = model.ffn_hidden).
  int64_t Cl_, NHl_, Fl_;
  // The llama family: its key/value heads here, the fused QKV width here (3 Cl for gpt2),
  // the head size, RMSNorm's epsilon and the untied LM head's offset in the local buffers
  // (-1: tied). The rotary table (rope_table_) holds positions [0, T_).
  bool llama_ = false;
  int64_t KVl_ = 0, QKVl_ = 0, HS_ = 0, lm_head_off_ = -1;
  float norm_eps_ = 1e-5f;
  AttentionImpl attention_impl_ = AttentionImpl::automatic;
  LinearOptions linear_;
  bool verbose_ = false, printed_plans_ = false;
  bool lm_head_padded_dw_ = false, autotune_ = true;

  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t loss_ready_ = nullptr, buckets_sent_ = nullptr;
  std::unique_ptr<Gemm> gemm_;

  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;  // AISCALE_CUDA_ATTENTION=cudnn / auto
  std::unique_ptr<cuda::Fp8Training> fp8_;  // train.precision = "fp8" (else null)
  int64_t num_unique_ = 0;

  // AISCALE_CUDA_TIMING (null when off); the reducer reports its buckets' times into it.
  std::unique_ptr<profile::StepTimer> timer_;
  std::unique_ptr<profile::GpuOpRecorder> op_recorder_;  // --profile window only
  // Data parallelism (subscribe_reducer): null without it.
  std::unique_ptr<parallel::dp::Reducer> reducer_;
  std::unique_ptr<optim::Zero1> zero1_;
  // parallel.zero_stage = 3 (or 2) over several ranks (under tensor parallelism: over the
  // data group, each rank's local buffer sharded).
  std::unique_ptr<Zero3> zero3_;
  std::unique_ptr<GptCudaTensorParallel> tp_;  // parallel.tensor_parallel > 1
  // parallel.pipeline_parallel > 1: the pipeline group (set from the start) and the stage
  // (made after the warm-up, which runs the stage's layers on this GPU); the model stream's
  // waits on the other stages in the last step; the data-parallel copies of this stage
  // (null: one copy), over which its gradients are summed.
  parallel::Communicator* pipeline_ = nullptr;
  parallel::Communicator* data_group_ = nullptr;
  // The layers this rank computes [lb(), le()): a pipeline stage's, else [0, L).
  int64_t lb() const { return shard_.first_layer(); }
  int64_t le() const { return shard_.end_layer(); }
  std::unique_ptr<GptCudaPipeline> pp_;
  double wait_s_ = 0.0;
  const void* layer_w_ = nullptr;        // ZeRO-3: the gathered layer now computing
  int64_t world_ = 1, rank_ = 0;
  int64_t Ppad_ = 0, S_ = 0;  // gradient buffer length, master/moment (shard) length
  bool dp_ = false, zero_ = false, overlap_ = true;
  bool has_targets_ = false, forward_done_ = false;
  // Tensor parallelism with data-parallel copies: this step's backward sums the gradients
  // over the data-parallel group (off for all but the last micro-step of accumulation).
  bool tp_sync_ = true;
  LogitsState logits_state_ = LogitsState::consumed;
  float grad_multiplier_hint_ = 1.0f;  // dlogits of a fused forward are scaled by this
  float dlogits_multiplier_ = 1.0f;
};

}  // namespace aiscale::nn::detail
