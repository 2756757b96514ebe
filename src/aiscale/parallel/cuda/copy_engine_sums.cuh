// The kernels of the copy-engine gradient exchange (copy_engine_group.h): the copies and
// the flags are the copy engines' and the GPU front end's work, and only what needs SMs is
// here: summing a rank's chunk with the peers' staged copies (fp32 or bf16, summed in fp32
// in rank order, so every rank gets the same bits), optionally adding up the squares of
// the sums for the gradient norm, and raising a peer's flag by a one-thread kernel where
// the driver will not write into peer memory. Kept apart from copy_engine_group.cu, which
// sets up the IPC mappings and orders the copies, flags and waits.
#pragma once
#include <cstdint>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::parallel::copy_engine {

// Where a sum kernel adds the sum of squares of the values it writes (all null: it does
// not). Deterministic: each block leaves its partial in its slot, and the block that
// finishes last adds the slots up in a fixed order into *out and clears the counter.
struct SquareSums {
  double* out = nullptr;
  double* partials = nullptr;  // one per block
  unsigned* counter = nullptr;
};

// The most blocks a sum kernel runs with: SquareSums::partials holds one double per block.
constexpr int kMaxSumBlocks = 1056;

// Sums m values of a chunk (self) with the staged copies (one slot of slot_elems values per
// rank at `staging`, rank `me`'s own values in `self`), in place, on stream s; adds the
// squares of the sums into *q.out where q.out is set.
void launch_sum(float* self, const float* staging, int64_t slot_elems, int world, int me, int64_t m,
                const SquareSums& q, cudaStream_t s);
void launch_sum(cuda::bf16* self, const cuda::bf16* staging, int64_t slot_elems, int world, int me,
                int64_t m, const SquareSums& q, cudaStream_t s);

// Sets *flag (in a peer's memory) to `value` on stream s, after the copies queued before
// it there; the caller checks the launch.
void launch_raise_flag(uint32_t* flag, uint32_t value, cudaStream_t s);

}  // namespace aiscale::parallel::copy_engine
