// ZeRO-3 for the GPU GPT model: parameters, gradients, fp32 master weights and AdamW
// moments all sharded over the data-parallel ranks (optim/zero3_layout.h says where),
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
#pragma once
#include <cuda_runtime.h>

#include "aiscale/core/dtype.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/ops/ops.h"
#include "aiscale/optim/zero3_layout.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::optim {

class Zero3 {
 public:
  Zero3(parallel::Communicator& comm, const nn::GptLayout& layout, int64_t vocab_padded, DType t);
  ~Zero3();
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  const GptZero3Layout& shards() const { return z_; }
  int64_t shards_size() const { return z_.shards_size(); }

  // Memory, allocated by the model in its arena.
  struct Buffers {
    float *master = nullptr, *m = nullptr, *v = nullptr, *grads = nullptr;  // shards_size()
    void* work = nullptr;            // shards_size() values of t: this rank's working copy
    void* resident = nullptr;        // resident_size() of t: embeddings and ln_f gathered
    void* slot[2] = {nullptr, nullptr};          // layer_padded() of t each
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
  // Sum of squares of the summed gradients over all ranks' shards.
  double grad_sum_squares();
  void update(const ops::AdamWParams& hp, bool decay_embeddings);
  // Waits (bounded by the communicator's timeout) for the queued collectives.
  void finish();

  // --- whole vectors (checkpoints, initialisation); collective where gathering ---
  // This rank's shards of a whole flat host vector into `shard` (device); for the master
  // weights the working copy is refreshed too.
  void scatter(const float* flat, float* shard);
  void set_params(const float* flat);
  // Every rank's shards of `shard` assembled into a whole flat host vector.
  void gather(const float* shard, float* flat);
  float* master() const { return b_.master; }
  float* m() const { return b_.m; }
  float* v() const { return b_.v; }
  float* grads() const { return b_.grads; }

 private:
  void fetch(int u, void* dst);  // gather unit u into dst on the communicator's stream
  void after_model();            // the communicator's stream waits for the model's work
  cudaStream_t comm_stream() const { return static_cast<cudaStream_t>(comm_.device_stream()); }

  parallel::Communicator& comm_;
  nn::GptLayout layout_;
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
  bool resident_valid_ = false;
};

}  // namespace aiscale::optim
