// The sampling semantics of image_source.h on the in-memory source: one permutation per
// (seed, epoch) shared by all ranks, sharding, repeat factor, position/restore,
// normalisation, layouts, channel conversion, determinism of augmentation.
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "aiscale/data/images/memory_source.h"
#include "../support/error_of.h"

namespace aiscale::data {
namespace {

using testsupport::error_of;

// Image i is filled with the value i (so a served image tells which record it is) and
// labelled i % classes.
ImageArray numbered_images(int64_t n, int64_t h = 4, int64_t w = 4, int64_t c = 1, int64_t classes = 5) {
  ImageArray a;
  a.count = n, a.height = h, a.width = w, a.channels = c;
  a.pixels.resize(n * h * w * c);
  for (int64_t i = 0; i < n; ++i)
    std::fill_n(a.pixels.begin() + i * h * w * c, h * w * c, static_cast<uint8_t>(i));
  for (int64_t i = 0; i < n; ++i) a.labels.push_back(static_cast<int32_t>(i % classes));
  return a;
}

ImageSourceConfig identity_config(int64_t batch, int rank = 0, int world = 1, bool train = true) {
  ImageSourceConfig c;
  c.batch_size = batch;
  c.rank = rank;
  c.world_size = world;
  c.seed = 7;
  c.train = train;
  c.augment = "none";
  c.mean = {0.0f};
  c.std = {1.0f / 255.0f};  // pixel value v is served as v
  return c;
}

std::vector<int64_t> served_records(const ImageBatch& b) {
  std::vector<int64_t> r;
  const int64_t per = b.channels * b.height * b.width;
  for (int64_t j = 0; j < b.n; ++j) r.push_back(std::lround(b.pixels[j * per]));
  return r;
}

TEST(ImageMemorySource, EpochIsAPermutationThatChangesEachEpoch) {
  MemoryImageSource src(numbered_images(50), 0, identity_config(10));
  EXPECT_EQ(src.batches_per_epoch(), 5);
  EXPECT_EQ(src.num_classes(), 5);
  ImageBatch b;
  std::vector<int64_t> epoch0, epoch1;
  for (int k = 0; k < 5; ++k) {
    src.next_batch(b);
    for (int64_t r : served_records(b)) epoch0.push_back(r);
    for (int64_t j = 0; j < b.n; ++j) EXPECT_EQ(b.labels[j], served_records(b)[j] % 5);
  }
  EXPECT_EQ(src.position(), (ImageSource::Position{1, 0}));
  for (int k = 0; k < 5; ++k) {
    src.next_batch(b);
    for (int64_t r : served_records(b)) epoch1.push_back(r);
  }
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(epoch0, epoch1);
  std::vector<int64_t> identity(50);
  for (int64_t i = 0; i < 50; ++i) identity[i] = i;
  EXPECT_NE(epoch0, identity);
}

TEST(ImageMemorySource, RanksSplitEachGlobalBatchLikeOneRankWithTheWholeBatch) {
  MemoryImageSource whole(numbered_images(40), 0, identity_config(8));
  MemoryImageSource r0(numbered_images(40), 0, identity_config(4, 0, 2));
  MemoryImageSource r1(numbered_images(40), 0, identity_config(4, 1, 2));
  ImageBatch b, b0, b1;
  for (int k = 0; k < 12; ++k) {  // crosses two epoch boundaries
    whole.next_batch(b);
    r0.next_batch(b0);
    r1.next_batch(b1);
    std::vector<int64_t> joined = served_records(b0);
    for (int64_t r : served_records(b1)) joined.push_back(r);
    EXPECT_EQ(joined, served_records(b)) << "global batch " << k;
  }
}

TEST(ImageMemorySource, RepeatFactorVisitsEachRecordKTimes) {
  ImageSourceConfig c = identity_config(6);
  c.repeat = 3;
  MemoryImageSource src(numbered_images(10), 0, c);
  EXPECT_EQ(src.records(), 10);
  EXPECT_EQ(src.batches_per_epoch(), 5);  // 30 positions / 6
  std::vector<int64_t> count(10, 0);
  ImageBatch b;
  for (int k = 0; k < 5; ++k) {
    src.next_batch(b);
    for (int64_t r : served_records(b)) ++count[r];
  }
  for (int64_t n : count) EXPECT_EQ(n, 3);
}

TEST(ImageMemorySource, ValidationServesTheStoredOrder) {
  MemoryImageSource src(numbered_images(10), 0, identity_config(5, 0, 1, /*train=*/false));
  ImageBatch b;
  src.next_batch(b);
  EXPECT_EQ(served_records(b), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  src.next_batch(b);
  EXPECT_EQ(served_records(b), (std::vector<int64_t>{5, 6, 7, 8, 9}));
}

TEST(ImageMemorySource, RestoreResumesExactlyAndRejectsForeignPositions) {
  ImageSourceConfig c = identity_config(4);
  c.augment = "crop-flip";
  c.mean = {};
  c.std = {};
  MemoryImageSource a(numbered_images(20, 8, 8), 0, c), b(numbered_images(20, 8, 8), 0, c);
  ImageBatch x, y;
  for (int k = 0; k < 7; ++k) a.next_batch(x);
  b.restore(a.position());
  EXPECT_EQ(a.position(), (ImageSource::Position{1, 2}));
  for (int k = 0; k < 4; ++k) {
    a.next_batch(x);
    b.next_batch(y);
    EXPECT_EQ(x.pixels, y.pixels);
    EXPECT_EQ(x.labels, y.labels);
  }
  EXPECT_NE(error_of([&] { b.restore({0, 9}); }).find("epoch has 5 global batches"), std::string::npos);
  b.restore({3, 5});  // the end of epoch 3 is the start of epoch 4
  EXPECT_EQ(b.position(), (ImageSource::Position{4, 0}));
}

TEST(ImageMemorySource, AugmentationDoesNotDependOnThreads) {
  ImageArray images = numbered_images(16, 12, 10, 3);
  for (size_t i = 0; i < images.pixels.size(); ++i) images.pixels[i] = static_cast<uint8_t>(i * 31 % 251);
  ImageSourceConfig c = identity_config(8);
  c.augment = "crop-flip";
  c.height = c.width = 6;
  c.mean = {0.5f, 0.4f, 0.3f};
  c.std = {0.2f, 0.2f, 0.2f};
  c.threads = 1;
  MemoryImageSource one(images, 0, c);
  c.threads = 3;
  MemoryImageSource three(images, 0, c);
  ImageBatch x, y;
  for (int k = 0; k < 4; ++k) {
    one.next_batch(x);
    three.next_batch(y);
    EXPECT_EQ(x.pixels, y.pixels);
  }
  EXPECT_EQ(x.height, 6);
  EXPECT_EQ(x.channels, 3);
  // Another seed gives other crops.
  c.seed = 8;
  MemoryImageSource other(images, 0, c);
  other.next_batch(y);
  one.restore({0, 0});
  one.next_batch(x);
  EXPECT_NE(x.pixels, y.pixels);
}

TEST(ImageMemorySource, NormalisesAndLaysOutChannels) {
  // One 2x2 RGB image: pixel p has (10p, 100, 200).
  ImageArray a;
  a.count = 1, a.height = 2, a.width = 2, a.channels = 3;
  a.pixels.resize(12);
  for (int p = 0; p < 4; ++p) {
    a.pixels[p * 3] = static_cast<uint8_t>(10 * p);
    a.pixels[p * 3 + 1] = 100;
    a.pixels[p * 3 + 2] = 200;
  }
  a.labels = {0};
  ImageSourceConfig c = identity_config(1, 0, 1, false);
  c.mean = {0.0f, 100.0f / 255.0f, 0.5f};
  c.std = {10.0f / 255.0f, 1.0f, 0.25f};
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    c.layout = layout;
    MemoryImageSource src(a, 1, c);
    ImageBatch b;
    src.next_batch(b);
    ASSERT_EQ(b.pixels.size(), 12u);
    for (int p = 0; p < 4; ++p) {
      const auto at = [&](int ch) {
        return layout == ImageLayout::nchw ? b.pixels[ch * 4 + p] : b.pixels[p * 3 + ch];
      };
      EXPECT_NEAR(at(0), p, 1e-5);
      EXPECT_NEAR(at(1), 0.0, 1e-5);
      EXPECT_NEAR(at(2), (200.0 / 255.0 - 0.5) / 0.25, 1e-5);
    }
  }
  // Served as grey: luma of the stored colours.
  c.channels = 1;
  c.mean = {0.0f};
  c.std = {1.0f / 255.0f};
  MemoryImageSource grey(a, 1, c);
  ImageBatch b;
  grey.next_batch(b);
  ASSERT_EQ(b.channels, 1);
  EXPECT_NEAR(b.pixels[0], 0.587 * 100 + 0.114 * 200, 1e-3);
}

TEST(ImageMemorySource, StoredStatisticsNormaliseToZeroMeanUnitStd) {
  ImageArray images = numbered_images(30, 4, 4, 1);
  ImageSourceConfig c = identity_config(30, 0, 1, false);
  c.mean = {};
  c.std = {};
  MemoryImageSource src(images, 0, c);
  ImageBatch b;
  src.next_batch(b);
  double sum = 0, sum_sq = 0;
  for (float v : b.pixels) sum += v, sum_sq += double(v) * v;
  const double n = static_cast<double>(b.pixels.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(sum_sq / n, 1.0, 1e-3);
}

TEST(ImageMemorySource, BadInputIsAClearError) {
  ImageArray bad = numbered_images(10);
  bad.labels[3] = 9;
  EXPECT_NE(error_of([&] { MemoryImageSource(bad, 5, identity_config(2)); }).find("image 3 has label 9"),
            std::string::npos);
  EXPECT_NE(error_of([&] { MemoryImageSource(numbered_images(10), 0, identity_config(4, 0, 3)); })
                .find("less than one global batch"),
            std::string::npos);
  EXPECT_NE(error_of([&] { MemoryImageSource(numbered_images(10), 0, identity_config(2, 2, 2)); })
                .find("rank 2 is not in"),
            std::string::npos);
  ImageSourceConfig c = identity_config(2);
  c.augment = "mixup";
  EXPECT_NE(error_of([&] { MemoryImageSource(numbered_images(10), 0, c); }).find("unknown image augmentation"),
            std::string::npos);
  c = identity_config(2);
  c.mean = {0.1f, 0.2f};
  EXPECT_NE(error_of([&] { MemoryImageSource(numbered_images(10), 0, c); }).find("2 value(s) for 1 channel"),
            std::string::npos);
}

}  // namespace
}  // namespace aiscale::data
