#include "aiscale/parallel/tensor/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace aiscale::parallel::tensor {

const float* column_forward(const ops::Backend& ops, const TensorGroup& g, float* out,
                            const float* x, float* x_full, const float* w, const float* b,
                            int64_t n, int64_t c, int64_t ocl) {
  const float* in = enter_forward(g, x, x_full, n, c);
  ops.matmul_forward(out, in, w, b, n, c, ocl);
  return in;
}

void column_backward(const ops::Backend& ops, const TensorGroup& g, float* dx, float* dx_full,
                     float* dw, float* db, const float* dout, const float* x_used,
                     const float* w, int64_t n, int64_t c, int64_t ocl) {
  float* target = g.sequence_parallel && g.split() ? dx_full : dx;
  ops.matmul_backward(target, dw, db, dout, x_used, w, n, c, ocl);
  enter_backward(g, target, dx, n, c);
}

void row_forward(const ops::Backend& ops, const TensorGroup& g, float* out, float* partial,
                 const float* x, const float* w, const float* b, int64_t n, int64_t cl,
                 int64_t oc) {
  if (!g.split()) {  // one rank: the fused op, bit for bit the plain model
    ops.matmul_forward(out, x, w, b, n, cl, oc);
    return;
  }
  float* target = g.sequence_parallel ? partial : out;
  ops.matmul_forward(target, x, w, nullptr, n, cl, oc);
  leave_forward(g, target, out, n, oc);
  if (!b) return;
  const int64_t rows = g.rows(n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < oc; ++o) out[i * oc + o] += b[o];
}

void row_backward(const ops::Backend& ops, const TensorGroup& g, float* dx, float* dw, float* db,
                  const float* dout, float* dout_full, const float* x, const float* w, int64_t n,
                  int64_t cl, int64_t oc) {
  if (!g.sequence_parallel || !g.split()) {
    ops.matmul_backward(dx, dw, db, dout, x, w, n, cl, oc);
    return;
  }
  const float* full = leave_backward(g, dout, dout_full, n, oc);
  ops.matmul_backward(dx, dw, nullptr, full, x, w, n, cl, oc);
  // The bias sits in the token-split region: this rank's tokens only (summed over the
  // tensor ranks with the other replicated gradients).
  if (!db) return;
  const int64_t rows = g.rows(n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < oc; ++o) db[o] += dout[i * oc + o];
}

void vocab_embedding_forward(const ops::Backend& ops, const TensorGroup& g, float* out,
                             float* partial, const int32_t* tokens, const float* wte,
                             const float* wpe, VocabSlice vocab, int64_t B, int64_t T, int64_t C) {
  if (!g.split()) {
    ops.embedding_forward(out, tokens, wte, wpe, B, T, C);
    return;
  }
  const int64_t n = B * T;
  float* target = g.sequence_parallel ? partial : out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = tokens[i] - vocab.first;
    float* row = target + i * C;
    if (v >= 0 && v < vocab.size) std::memcpy(row, wte + v * C, size_t(C) * 4);
    else std::memset(row, 0, size_t(C) * 4);
  }
  leave_forward(g, target, out, n, C);
  if (!wpe) return;
  const int64_t rows = g.rows(n), first = g.first_row(n);
  for (int64_t i = 0; i < rows; ++i) {
    const float* pos = wpe + ((first + i) % T) * C;
    for (int64_t k = 0; k < C; ++k) out[i * C + k] += pos[k];
  }
}

void vocab_embedding_backward(const ops::Backend& ops, const TensorGroup& g, float* dwte,
                              float* dwpe, const float* dout, float* dout_full,
                              const int32_t* tokens, VocabSlice vocab, int64_t B, int64_t T,
                              int64_t C) {
  if (!g.split()) {
    ops.embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
    return;
  }
  const int64_t n = B * T;
  const float* full = leave_backward(g, dout, dout_full, n, C);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = tokens[i] - vocab.first;
    if (v < 0 || v >= vocab.size) continue;
    float* row = dwte + v * C;
    for (int64_t k = 0; k < C; ++k) row[k] += full[i * C + k];
  }
  if (!dwpe) return;
  const int64_t rows = g.rows(n), first = g.first_row(n);
  for (int64_t i = 0; i < rows; ++i) {
    float* pos = dwpe + ((first + i) % T) * C;
    for (int64_t k = 0; k < C; ++k) pos[k] += dout[i * C + k];
  }
}

// stats: every rank's row maxima (size x N, gathered), then the global row maxima (N) and
// the sums of exponentials (N), which backward reads.
void vocab_xent_forward(const ops::Backend& ops, const TensorGroup& g, float* losses,
                        float* stats, const float* logits, const int32_t* targets, int64_t n,
                        VocabSlice vocab) {
  if (!g.split()) {
    ops.softmax_xent_forward(losses, logits, targets, n, vocab.size);
    return;
  }
  const int64_t V = vocab.size;
  float* gathered = stats;                       // (size, N) row maxima of every rank
  float* row_max = stats + n * g.size;           // (N)
  float* row_sum = row_max + n;                  // (N)
  std::vector<float> local(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * V;  // (a slice may hold no real rows)
    local[i] = V > 0 ? *std::max_element(row, row + V) : -std::numeric_limits<float>::infinity();
  }
  g.comm->allgather(local.data(), gathered, n);
  for (int64_t i = 0; i < n; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int r = 0; r < g.size; ++r) m = std::max(m, gathered[r * n + i]);
    row_max[i] = m;
  }
  // Sums of exponentials and the target's logit (from the rank that holds it), summed.
  std::vector<double> sums(static_cast<size_t>(2 * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * V;
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - double(row_max[i]));
    sums[i] = s;
    const int64_t t = targets[i] - vocab.first;
    if (t >= 0 && t < V) sums[n + i] = double(row[t]);
  }
  g.comm->allreduce_sum(sums.data(), 2 * n);
  for (int64_t i = 0; i < n; ++i) {
    row_sum[i] = static_cast<float>(sums[i]);
    losses[i] = static_cast<float>(std::log(sums[i]) + double(row_max[i]) - sums[n + i]);
  }
}

void vocab_xent_backward(const ops::Backend& ops, const TensorGroup& g, float* dlogits,
                         const float* logits, const float* stats, const int32_t* targets,
                         const float* dlosses, int64_t n, VocabSlice vocab) {
  if (!g.split()) {
    ops.softmax_xent_backward(dlogits, logits, targets, dlosses, n, vocab.size);
    return;
  }
  const int64_t V = vocab.size;
  const float* row_max = stats + n * g.size;
  const float* row_sum = row_max + n;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = targets[i] - vocab.first;
    const double inv = 1.0 / double(row_sum[i]);
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(double(logits[i * V + v]) - double(row_max[i])) * inv;
      dlogits[i * V + v] = static_cast<float>(dlosses[i] * (p - (v == t ? 1.0 : 0.0)));
    }
  }
}

}  // namespace aiscale::parallel::tensor
