// ZeRO-3 for the GPU GPT model: parameters, gradients, fp32 master weights and AdamW
// moments all sharded over the data-parallel ranks (nn/models/gpt_zero3_layout.h says where),
// each unit's working copy all-gathered right before it computes and dropped after, its
// gradients reduce-scattered into the shards as soon as its backward is done. Model state
// per GPU is 18 / world bytes per parameter (master, m, v, gradient: 4 each; working copy:
// 2) plus two gathered layers, three layer gradient buffers and the embeddings.
//
// Streams: the model's stream computes; the communicator's stream gathers and reduces.
// A gather of layer j waits for everything the model had queued when it was asked for
// (so its buffer's previous layer is done and the working shard is up to date); the model
// waits for the gather right before the layer. In forward, layer l + 1 is fetched while l
// computes; in backward, l - 1 while l computes (the last two layers of forward are still
// there). Layer l's gradients collect in buffer l % 3 (zeroed once its previous reduction
// has finished); when l's backward is done they are reduce-scattered in place and added
// into this rank's gradient shard on the communicator's stream, so that gradient
// accumulation over micro-steps sums in the shards.
//
// Optimizer offload (parallel.offload_optimizer): the fp32 master weights and both AdamW
// moments live in pinned host memory instead; each update copies the gradient shard to
// the host, runs AdamW on the CPU's threads, and copies the new working-copy shard back.
// The GPU then holds 6 / world bytes per parameter (gradient and working-copy shards).
// With one rank (no communicator) the same machinery streams the layers through the two
// buffers without collectives: a model that fits one GPU only with its optimizer state on
// the host trains there.
//
// ZeRO-2 (gathered_layers): the same shards of gradients, master weights and AdamW moments,
// the same reduce-scatter of each layer's gradients after its backward, but every layer's
// working copy stays gathered from one update to the next: one buffer per layer instead of
// two rotating ones, each all-gathered once per step (queued in order at the step's first
// forward, the model waiting for each layer only right before it computes) and read again
// by the backward without a second gather. Model state per GPU: 16 / world bytes per
// parameter plus the whole working copy (2 in bf16).
//
// Beside tensor parallelism (dp x tp): each tensor rank's local buffer (its
// nn::GptShardLayout: its slices of the layers, the replicated tensors whole) takes the
// place of the whole model, sharded over the rank's data-parallel group; a gathered layer
// is the rank's slice of it. The tensor ranks' local buffers have the same length and the
// replicated tensors the same offsets, so every data group cuts its buffer alike: the
// replicated gradients, equal on the tensor ranks of a copy, are reduced alike and the
// replicated parameters stay equal across the tensor group. The gradient norm counts the
// split tensors' squares on every tensor rank and the replicated ones once.
//
// It stands with the model whose parameter layout it cuts (gpt_layout.h, gpt_shard.h);
// optim/ holds the optimizers that know no model (docs/design/layers.md).
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/nn/models/gpt_zero3_layout.h"
#include "aiscale/ops/ops.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::nn {

class Zero3 {
 public:
  // comm: the data-parallel ranks (null: one rank). layout: this rank's parameters (the
  // whole model's, or its tensor-parallel slices). offload: the optimizer state on the host.
  // gathered_layers: ZeRO-2 (the layers' parameters kept gathered), else ZeRO-3.
  // tensor_group: the tensor-parallel group (several ranks) for the gradient norm, or null.
  Zero3(parallel::Communicator* comm, const nn::GptShardLayout& layout, int64_t vocab_padded,
        DType t, bool offload, bool decay_embeddings, bool gathered_layers = false,
        parallel::Communicator* tensor_group = nullptr);
  ~Zero3();
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  const GptZero3Layout& shards() const { return z_; }
  int64_t shards_size() const { return z_.shards_size(); }
  bool offload() const { return offload_; }
  // Gathered-layer buffers the model allocates (layer_padded() values of t each, one after
  // another in Buffers::slots): 2 rotating ones, or (ZeRO-2) one per layer.
  int64_t slots() const { return gathered_ ? L_ : 2; }

  // Memory, allocated by the model in its arena.
  struct Buffers {
    // shards_size() each; master, m, v unused (null) with offload.
    float *master = nullptr, *m = nullptr, *v = nullptr, *grads = nullptr;
    void* work = nullptr;            // shards_size() values of t: this rank's working copy
    void* resident = nullptr;        // resident_size() of t: embeddings and ln_f gathered
    void* slots = nullptr;           // slots() x layer_padded() of t
    float* layer_grads[3] = {nullptr, nullptr, nullptr};  // layer_padded() each
    float* resident_grads = nullptr;  // resident_size()
    double* sum_squares = nullptr;    // 1
    double* sum_squares_scratch = nullptr;
    double* host_sum_squares = nullptr;  // pinned, 1
  };
  void connect(const Buffers& b, cudaStream_t model_stream);

  // --- forward and backward ---
  // Before a forward: the resident units gathered (when stale); the model's stream waits.
  void begin_pass();
  // Layer l is about to compute in direction dir (+1 forward, -1 backward): fetches it
  // (unless held) and the next one in that direction; the model's stream waits for l.
  // Returns its gathered parameters (the working layout of the layer).
  const void* layer(int64_t l, int dir);
  const void* wte() const { return b_.resident; }
  const void* at_resident(int64_t values) const;
  // Before backward: the resident gradients and layer L-1's buffer zeroed.
  void begin_backward();
  // Layer l's gradient buffer (prepared), in its flat order within the layer.
  float* layer_grads(int64_t l) const { return b_.layer_grads[l % 3]; }
  // Zeroes the buffer of layer l (waits for the reduction of its previous layer).
  void prepare_layer_grads(int64_t l);
  // Layer l's gradients are complete on the model's stream: reduce-scatter them.
  void layer_backward_done(int64_t l);
  // The resident gradients: wte (padded rows), wpe, then ln_f at resident_lnf().
  float* resident_grads() const { return b_.resident_grads; }
  void resident_backward_done();

  // --- optimiser (after backward) ---
  void zero_grad();
  // Sum of squares of the summed gradients over all ranks' shards (with a tensor group: of
  // the whole model's, the split tensors' summed over the tensor ranks too).
  double grad_sum_squares();
  void update(const ops::AdamWParams& hp);
  // Waits (bounded by the communicator's timeout) for the queued collectives.
  void finish();

  // --- the state a range at a time (checkpoints, initialisation) ---
  // The shard buffer of the master weights (k = 0), m (1) or v (2): device memory, or with
  // offload pinned host memory (shards_size() values, where shards().owned_runs() says).
  // The model reads and writes ranges of it between steps, after finish().
  float* state_buffer(int k) const;
  // The master weights' shards have been written: the working copy follows them.
  void master_written();
  // --- whole flat gradient vectors (tests); collective ---
  void set_grads(const float* flat);
  void get_grads(float* flat);

 private:
  void fetch(int u, void* dst);  // gather unit u into dst on the communicator's stream
  void* slot(int64_t i) const {
    return static_cast<char*>(b_.slots) + i * z_.layer_padded() * int64_t(es_);
  }
  void after_model();            // the communicator's stream waits for the model's work
  void record(cudaEvent_t e);    // on the communicator's stream
  // This rank's shards of a whole flat host vector into `shard` (device or host memory),
  // and every rank's shards of `shard` assembled into one.
  void scatter(const float* flat, float* shard);
  void gather(const float* shard, float* flat);
  void update_on_host(const ops::AdamWParams& hp);
  double tensor_grad_sum_squares();
  cudaStream_t comm_stream() const { return comm_stream_; }

  parallel::Communicator* comm_;  // null or one rank: no collectives
  bool multi_ = false;            // several ranks
  cudaStream_t comm_stream_ = nullptr, own_stream_ = nullptr;
  bool offload_ = false, decay_embeddings_ = true, gathered_ = false;
  // Offload: pinned host shards (master, m, v, gradients; the working copy in t).
  float *h_master_ = nullptr, *h_m_ = nullptr, *h_v_ = nullptr, *h_grads_ = nullptr;
  void* h_work_ = nullptr;
  nn::GptShardLayout layout_;
  // With a tensor group: the shard buffer's split and replicated pieces (GptZero3Layout::
  // pieces), a device sum of squares per piece.
  parallel::Communicator* tensor_ = nullptr;
  std::vector<GptZero3Layout::Piece> pieces_;
  double* piece_sums_ = nullptr;
  std::vector<double> piece_sums_host_;  // pieces_.size(), read back each step
  GptZero3Layout z_;
  DType t_;
  size_t es_;
  int64_t L_;
  Buffers b_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t model_mark_ = nullptr, resident_ready_ = nullptr, comm_done_ = nullptr;
  cudaEvent_t slot_ready_[2] = {nullptr, nullptr};
  cudaEvent_t reduced_[3] = {nullptr, nullptr, nullptr};
  cudaEvent_t resident_reduced_ = nullptr;
  int64_t slot_holds_[2] = {-1, -1};
  std::vector<cudaEvent_t> layer_ready_;  // ZeRO-2: layer l's gather of this step
  bool resident_valid_ = false;
};

}  // namespace aiscale::nn
