// The gradient buckets of data parallelism: which ranges of a model's flat gradient buffer
// are summed together, in which order, and (ZeRO-1) which part of each a rank owns. A pure
// function of the model's published gradient order (gradient_segments.h), the bucket
// size and the world size, so that it is tested without a GPU.
//
// Included by CUDA sources (C++17).
#pragma once
#include <climits>
#include <cstdint>
#include <vector>

#include "aiscale/parallel/data_parallel/gradient_segments.h"

namespace aiscale::parallel::dp {

// The point of a bucket that is summed once after the whole backward (overlap off).
constexpr int kAfterBackward = INT_MIN;

struct BucketPlanOptions {
  int64_t bucket_values = 1;  // target size: a bucket closes once it holds this many values
  int world = 1;
  // ZeRO-1: every boundary on a multiple of world (rounded as each segment says), the
  // buffer padded to a multiple of world, and rank r owning the r-th of world equal parts
  // of every bucket.
  bool shard = false;
  // false: one bucket of everything, at kAfterBackward.
  bool overlap = true;
};

struct Bucket {
  int64_t begin = 0, end = 0;  // flat range (of the padded buffer)
  int point = 0;               // summed once the model has passed this point of backward
  int64_t part = 0;            // ZeRO-1: (end - begin) / world, one rank's part; else the size
  int64_t shard_offset = 0;    // ZeRO-1: where this bucket's part starts in a rank's shard
  int64_t size() const { return end - begin; }
};

struct BucketPlan {
  std::vector<Bucket> buckets;  // in the order they are summed (backward's order)
  int64_t padded_size = 0;      // the gradient buffer's length: size rounded up to world
  int64_t shard_size = 0;       // ZeRO-1: padded_size / world; else the size
};

// Walks the segments in completion order, merging neighbours in memory into one bucket
// until it holds at least bucket_values values or a segment asks for a cut; empty buckets
// (possible after rounding) are dropped. Error when the segments do not tile [0, size).
BucketPlan plan_buckets(const GradientOrder& order, int64_t size,
                        const BucketPlanOptions& options);

// Values per bucket for a size in MiB of fp32 gradients (at least 1).
int64_t bucket_values_for_mib(double mib);

}  // namespace aiscale::parallel::dp
