// Compressed gradient exchange with error feedback (parallel.compression). Each rank
// sends a lossy summary of its gradient and keeps what the summary left out (the
// residual), which it adds to its next step's gradient: nothing is lost, only delayed,
// which is what lets compressed training reach the uncompressed loss.
//   topk: the k values of largest magnitude and their indices (8 bytes each instead of
//         4 bytes for every value), k = ceil(ratio x n);
//   int8: every value rounded to 8 bits with one fp32 scale per bucket of kInt8Bucket
//         values (scale = the bucket's largest magnitude / 127): ~1/4 of the bytes.
// The summaries differ between ranks (other indices, other scales), so they cannot be
// summed on the way like dense buffers: they are all-gathered and every rank adds all of
// them up, in rank order, to the same bits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/parallel/comm.h"

namespace aiscale::parallel::algorithms {

inline constexpr int64_t kInt8Bucket = 4096;

// Values top-k keeps of n at `ratio` (at least 1).
int64_t topk_count(int64_t n, double ratio);

// Bytes one rank contributes per exchange of n values.
int64_t topk_payload_bytes(int64_t n, double ratio);
int64_t int8_payload_bytes(int64_t n);

// One rank's side of a compressed exchange: holds the residual between steps.
class CompressedExchange {
 public:
  // kind: "topk" or "int8" (anything else fails); n: the buffer's values.
  CompressedExchange(std::string kind, int64_t n, double topk_ratio);
  // grads (n values) += residual; the summary is all-gathered over `comm`; grads become
  // the sum of every rank's summary (the same bits on every rank) and the residual what
  // this rank's summary left out.
  void exchange(Communicator& comm, float* grads);
  // Bytes this rank contributes per exchange (its summary).
  int64_t payload_bytes() const { return payload_bytes_; }
  const std::vector<float>& residual() const { return residual_; }

  // The halves, exposed for tests. Encode: grads += residual, then the message (floats;
  // integers and bytes travel as their bits) and the new residual. Decode: adds one
  // rank's message into out.
  std::vector<float> encode(float* grads);
  void decode_add(const float* message, float* out) const;

 private:
  void drop_non_finite_residual();
  std::string kind_;
  int64_t n_;
  int64_t k_ = 0;               // top-k: values sent
  int64_t message_floats_ = 0;  // one rank's message
  int64_t payload_bytes_ = 0;
  std::vector<float> residual_;
};

}  // namespace aiscale::parallel::algorithms
