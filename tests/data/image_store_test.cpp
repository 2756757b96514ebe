// Image stores end to end: pack-images from a folder and from IDX files, the LMDB source's
// semantics (the same batches as the in-memory source, independent of threads and
// staging), and its bad input.
#include <lmdb.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "aiscale/data/images/codec.h"
#include "aiscale/data/images/idx.h"
#include "aiscale/data/images/lmdb_source.h"
#include "aiscale/data/images/memory_source.h"
#include "aiscale/data/images/pack_images.h"
#include "../support/error_of.h"
#include "../support/run_support.h"
#include "image_test_images.h"

namespace aiscale::data {
namespace {

using testsupport::error_of;
namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ImageStore, RawIdxStoreServesExactlyWhatTheMemorySourceServes) {
  const fs::path dir = testsupport::temp_dir("store-raw");
  const ImageArray images = test_images::gradient_array(37, 9, 11, 1, 4);
  test_images::write_idx(dir / "img.gz", dir / "lbl", images);
  PackImagesOptions o;
  o.idx_images = (dir / "img.gz").string();
  o.idx_labels = (dir / "lbl").string();
  o.output = (dir / "store").string();
  o.encode = "raw";
  const PackImagesSummary s = pack_images(o);
  EXPECT_EQ(s.meta.records, 37);
  EXPECT_EQ(s.meta.classes, 4);
  EXPECT_EQ(s.meta.height, 9);
  EXPECT_EQ(s.meta.channels, 1);
  EXPECT_FALSE(fs::exists(dir / "store.tmp-" / ""));
  for (bool train : {true, false}) {
    ImageSourceConfig c;
    c.path = o.output;
    c.batch_size = 4;
    c.seed = 3;
    c.train = train;
    c.height = c.width = 7;
    c.repeat = 2;
    c.threads = 3;
    auto lmdb = open_image_source(c);
    MemoryImageSource memory(images, 4, c);
    EXPECT_EQ(lmdb->batches_per_epoch(), memory.batches_per_epoch());
    EXPECT_EQ(lmdb->num_classes(), 4);
    ImageBatch a, b;
    for (int k = 0; k < 2 * lmdb->batches_per_epoch() + 3; ++k) {
      lmdb->next_batch(a);
      memory.next_batch(b);
      ASSERT_EQ(a.labels, b.labels) << "batch " << k;
      ASSERT_EQ(a.pixels, b.pixels) << "batch " << k;
    }
    EXPECT_EQ(lmdb->position(), memory.position());
    EXPECT_EQ(lmdb->stats().images, memory.stats().images);
  }
  fs::remove_all(dir);
}

TEST(ImageStore, FolderStoreIsDeterministicAcrossThreadsStagingAndRestore) {
  const fs::path dir = testsupport::temp_dir("store-folder");
  test_images::write_folder(dir / "images", {{"cat", 5}, {"dog", 4}, {"eel", 3}}, 40, 30);
  PackImagesOptions o;
  o.folder = (dir / "images").string();
  o.output = (dir / "store").string();
  const PackImagesSummary s = pack_images(o);
  EXPECT_EQ(s.meta.records, 12);
  EXPECT_EQ(s.meta.class_names, (std::vector<std::string>{"cat", "dog", "eel"}));
  EXPECT_EQ(s.meta.channels, 3);
  EXPECT_EQ(s.skipped_other, 1);  // a README beside the images

  ImageSourceConfig c;
  c.path = o.output;
  c.batch_size = 3;
  c.seed = 11;
  c.height = c.width = 16;
  c.threads = 1;
  c.prefetch_batches = 1;
  auto one = open_image_source(c);
  c.threads = 4;
  c.prefetch_batches = 3;
  c.stage = "ram";
  auto ram = open_image_source(c);
  c.stage = "local:" + (dir / "stage").string();
  auto local = open_image_source(c);
  ImageBatch a, b, d;
  std::vector<ImageBatch> first_run;
  for (int k = 0; k < 9; ++k) {
    one->next_batch(a);
    ram->next_batch(b);
    local->next_batch(d);
    ASSERT_EQ(a.pixels, b.pixels) << "batch " << k;
    ASSERT_EQ(a.pixels, d.pixels) << "batch " << k;
    ASSERT_EQ(a.labels, b.labels);
    first_run.push_back(a);
  }
  EXPECT_EQ(one->position(), (ImageSource::Position{2, 1}));
  EXPECT_EQ(fs::exists(dir / "stage"), true);
  one->restore({1, 2});
  one->next_batch(a);
  EXPECT_EQ(a.pixels, first_run[6].pixels);
  EXPECT_NE(first_run[0].pixels, first_run[4].pixels);
  fs::remove_all(dir);
}

TEST(ImageStore, HostAllocatorProvidesTheBatchBuffers) {
  const fs::path dir = testsupport::temp_dir("store-alloc");
  test_images::write_folder(dir / "images", {{"a", 3}, {"b", 3}}, 20, 20);
  PackImagesOptions o;
  o.folder = (dir / "images").string();
  o.output = (dir / "store").string();
  pack_images(o);
  int allocated = 0, freed = 0;
  std::vector<std::unique_ptr<char[]>> blocks;
  ImageSourceConfig c;
  c.path = o.output;
  c.batch_size = 2;
  c.layout = ImageLayout::nhwc;
  c.allocate_host = [&](size_t bytes) {
    ++allocated;
    blocks.emplace_back(new char[bytes]);
    return static_cast<void*>(blocks.back().get());
  };
  c.free_host = [&](void*) { ++freed; };
  {
    auto src = open_image_source(c);
    ImageBatchView view;
    src->next_batch_view(view);
    EXPECT_EQ(view.n, 2);
    EXPECT_EQ(view.height, 20);
    EXPECT_EQ(view.layout, ImageLayout::nhwc);
    bool inside = false;
    for (auto& block : blocks) inside = inside || reinterpret_cast<const char*>(view.pixels) == block.get();
    EXPECT_TRUE(inside);
  }
  EXPECT_EQ(allocated, 2 * 3);  // pixels + labels for prefetch_batches + 1 slots
  EXPECT_EQ(freed, allocated);
  fs::remove_all(dir);
}

TEST(ImageStore, MixedSizesAndChannelsAreServedInTheConfiguredShape) {
  const fs::path dir = testsupport::temp_dir("store-mixed");
  fs::create_directories(dir / "in" / "a");
  fs::create_directories(dir / "in" / "b");
  test_images::write_image(dir / "in" / "a" / "grey.png", 17, 9, 1, 1);
  test_images::write_image(dir / "in" / "a" / "rgba.png", 8, 12, 4, 2);
  test_images::write_image(dir / "in" / "b" / "rgb.jpg", 30, 20, 3, 3);
  test_images::write_image(dir / "in" / "b" / "grey.jpg", 10, 10, 1, 4);
  PackImagesOptions o;
  o.folder = (dir / "in").string();
  o.output = (dir / "store").string();
  const PackImagesSummary s = pack_images(o);
  EXPECT_EQ(s.meta.height, 0);  // mixed
  EXPECT_EQ(s.meta.channels, 3);
  ImageSourceConfig c;
  c.path = o.output;
  c.batch_size = 4;
  c.train = false;
  EXPECT_TRUE(contains(error_of([&] { open_image_source(c); }), "mixed sizes"));
  c.height = 8;
  c.width = 6;
  for (int64_t channels : {1, 3}) {
    c.channels = channels;
    auto src = open_image_source(c);
    ImageBatch b;
    src->next_batch(b);
    EXPECT_EQ(b.channels, channels);
    EXPECT_EQ(b.pixels.size(), static_cast<size_t>(4 * channels * 8 * 6));
    EXPECT_EQ(src->stats().skipped_corrupt, 0);
    for (float v : b.pixels) ASSERT_TRUE(std::isfinite(v));
  }
  fs::remove_all(dir);
}

// A store with a corrupt JPEG and a label out of range, written with the store writer.
std::string damaged_store(const fs::path& dir) {
  ImageStoreWriter writer((dir / "store").string(), 1 << 20);
  std::vector<uint8_t> px(8 * 8 * 3, 100);
  const std::vector<uint8_t> good = encode_jpeg(px.data(), 8, 8, 3);
  std::vector<uint8_t> bad = good;
  for (size_t i = 20; i < bad.size(); ++i) bad[i] = static_cast<uint8_t>(i * 13);  // garbage after the header
  for (int i = 0; i < 8; ++i) {
    const bool corrupt = i == 3, out_of_range = i == 5;
    const std::vector<uint8_t>& bytes = corrupt ? bad : good;
    writer.add({out_of_range ? 7 : i % 2, ImageEncoding::jpeg, 3, 8, 8}, bytes.data(), bytes.size());
  }
  ImageStoreMeta meta;
  meta.classes = 2;
  meta.class_names = {"x", "y"};
  meta.channels = 3;
  meta.height = meta.width = 8;
  meta.mean = {0.4f, 0.4f, 0.4f};
  meta.std = {0.2f, 0.2f, 0.2f};
  writer.finish(meta);
  return (dir / "store").string();
}

// By default a corrupt record stops the source with an error naming the store, the record
// (index and key), why, and the option that skips; with the option the records are
// skipped and counted exactly (those of the batches served), with one warning.
TEST(ImageStore, CorruptRecordsAreAnErrorByDefaultOrSkippedAndCountedByOption) {
  const fs::path dir = testsupport::temp_dir("store-corrupt");
  ImageSourceConfig c;
  c.path = damaged_store(dir);
  c.batch_size = 4;
  c.train = false;
  c.threads = 2;
  c.skip_corrupt_option = "data.skip_corrupt = true";
  {
    auto strict = open_image_source(c);
    ImageBatch b;
    const std::string message = error_of([&] { strict->next_batch(b); });
    EXPECT_TRUE(contains(message, "record 3 (LMDB key 0x0000000000000003) cannot be decoded as "
                                  "jpeg")) << message;
    EXPECT_TRUE(contains(message, c.path)) << message;
    EXPECT_TRUE(contains(message, "re-pack it")) << message;
    EXPECT_TRUE(contains(message, "skip such records with data.skip_corrupt = true")) << message;
  }
  {
    c.skip_corrupt = true;
    auto src = open_image_source(c);
    ImageBatch b;
    testing::internal::CaptureStderr();
    src->next_batch(b);  // records 0-2, then 4 for the corrupt 3
    EXPECT_EQ(src->stats().skipped_corrupt, 1);
    src->next_batch(b);  // records 4, 6 for the corrupt 5 (label 7), 6, 7
    const std::string warnings = testing::internal::GetCapturedStderr();
    EXPECT_EQ(b.n, 4);
    for (int32_t label : b.labels) EXPECT_LT(label, 2);
    EXPECT_EQ(src->stats().skipped_corrupt, 2);
    EXPECT_TRUE(contains(warnings, "record 3 (LMDB key 0x0000000000000003)")) << warnings;
    EXPECT_FALSE(contains(warnings, "record 5")) << "one warning only: " << warnings;
    c.skip_corrupt = false;
  }
  ImageBatch b;
  fs::remove_all(dir);
  // A label out of range, alone in its batch.
  const fs::path dir2 = testsupport::temp_dir("store-label");
  c.path = damaged_store(dir2);
  c.batch_size = 2;
  auto strict2 = open_image_source(c);
  strict2->next_batch(b);  // records 0, 1
  strict2->restore({0, 2});
  const std::string label_message = error_of([&] { strict2->next_batch(b); });
  EXPECT_TRUE(contains(label_message, "record 5 (LMDB key 0x0000000000000005) has label 7, "
                                      "outside [0, 2)")) << label_message;
  fs::remove_all(dir2);
}

// A store cut short (an interrupted copy): LMDB would map the missing pages and the first
// read of one would end the process with SIGBUS. It is refused at open, naming the file,
// both lengths and the fix, by every way of reading it.
TEST(ImageStore, TruncatedStoreIsRefusedBeforeAnyRecordIsRead) {
  const fs::path dir = testsupport::temp_dir("store-truncated");
  test_images::write_folder(dir / "images", {{"a", 12}, {"b", 12}}, 96, 80);
  PackImagesOptions o;
  o.folder = (dir / "images").string();
  o.output = (dir / "store").string();
  pack_images(o);
  const fs::path data = dir / "store" / "data.mdb";
  const uintmax_t full = fs::file_size(data);
  ASSERT_GE(full, 4u * 4096) << "the test needs a store of several pages";
  const uintmax_t cut = full / 2 / 4096 * 4096;
  fs::resize_file(data, cut);
  ImageSourceConfig c;
  c.path = o.output;
  c.batch_size = 2;
  for (const std::string& stage :
       std::vector<std::string>{"none", "ram", "local:" + (dir / "stage").string()}) {
    c.stage = stage;
    const std::string message = error_of([&] { open_image_source(c); });
    EXPECT_TRUE(contains(message, "is truncated")) << stage << ": " << message;
    EXPECT_TRUE(contains(message, data.string())) << stage << ": " << message;
    EXPECT_TRUE(contains(message, fmt::format("ends at byte {},", cut))) << stage << ": " << message;
    EXPECT_TRUE(contains(message, "its header says it runs to byte")) << stage << ": " << message;
    EXPECT_TRUE(contains(message, "re-pack it")) << stage << ": " << message;
  }
  EXPECT_FALSE(fs::exists(dir / "stage"));  // refused before the copy
  // Shorter than LMDB's own header pages.
  fs::resize_file(data, 100);
  c.stage = "none";
  const std::string tiny = error_of([&] { open_image_source(c); });
  EXPECT_TRUE(contains(tiny, "ends at byte 100, shorter than LMDB's two header pages")) << tiny;
  fs::remove_all(dir);
}

TEST(ImageStore, ForeignOrMissingStoresAreRefusedWithTheFix) {
  const fs::path dir = testsupport::temp_dir("store-foreign");
  ImageSourceConfig c;
  c.batch_size = 1;
  c.path = (dir / "nothing").string();
  EXPECT_TRUE(contains(error_of([&] { open_image_source(c); }), "does not exist"));
  fs::create_directories(dir / "plain");
  c.path = (dir / "plain").string();
  EXPECT_TRUE(contains(error_of([&] { open_image_source(c); }), "LMDB directory holding data.mdb"));
  // An LMDB with caffe-style keys and no metadata.
  fs::create_directories(dir / "caffe");
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_open(env, (dir / "caffe").c_str(), 0, 0644), 0);
  MDB_txn* txn = nullptr;
  MDB_dbi dbi;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  std::string key = "00000000", value = "datum";
  MDB_val k{key.size(), key.data()}, v{value.size(), value.data()};
  ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  c.path = (dir / "caffe").string();
  const std::string message = error_of([&] { open_image_source(c); });
  EXPECT_TRUE(contains(message, "written by another tool")) << message;
  EXPECT_TRUE(contains(message, "aiscale data pack-images")) << message;
  c.stage = "tape";
  c.path = (dir / "caffe").string();
  EXPECT_TRUE(contains(error_of([&] { open_image_source(c); }), "unknown image staging"));
  fs::remove_all(dir);
}

TEST(ImagePack, BadFolderAndIdxInputIsAClearErrorAndLeavesNothing) {
  const fs::path dir = testsupport::temp_dir("pack-bad");
  test_images::write_folder(dir / "images", {{"a", 2}, {"b", 2}}, 12, 12);
  fs::create_directories(dir / "images" / "empty");
  PackImagesOptions o;
  o.folder = (dir / "images").string();
  o.output = (dir / "store").string();
  std::string message = error_of([&] { pack_images(o); });
  EXPECT_TRUE(contains(message, "class folder")) << message;
  EXPECT_TRUE(contains(message, "empty")) << message;
  fs::remove(dir / "images" / "empty");
  // A corrupt JPEG in the folder: an error naming it, or skipped by option.
  std::ofstream(dir / "images" / "b" / "broken.jpg", std::ios::binary) << "\xFF\xD8\xFF garbage";
  message = error_of([&] { pack_images(o); });
  EXPECT_TRUE(contains(message, "broken.jpg")) << message;
  EXPECT_TRUE(contains(message, "--skip-bad-images")) << message;
  EXPECT_FALSE(fs::exists(o.output));
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find("store.tmp"), std::string::npos);
  o.skip_bad_images = true;
  EXPECT_EQ(pack_images(o).skipped_bad, 1);
  EXPECT_TRUE(contains(error_of([&] { pack_images(o); }), "already exists"));
  // IDX: a label beyond the class names, counts that disagree, a missing file.
  const ImageArray images = test_images::gradient_array(6, 4, 4, 1, 3);
  test_images::write_idx(dir / "img", dir / "lbl", images);
  PackImagesOptions idx;
  idx.idx_images = (dir / "img").string();
  idx.idx_labels = (dir / "lbl").string();
  idx.output = (dir / "idx-store").string();
  idx.class_names = {"p", "q"};
  message = error_of([&] { pack_images(idx); });
  EXPECT_TRUE(contains(message, "label 2, outside the 2 class names")) << message;
  ImageArray fewer = images;
  fewer.count = 5;
  fewer.labels.resize(5);
  test_images::write_idx(dir / "img5", dir / "lbl5", fewer);
  idx.class_names = {};
  idx.idx_labels = (dir / "lbl5").string();
  EXPECT_TRUE(contains(error_of([&] { pack_images(idx); }), "6 images"));
  idx.idx_labels = (dir / "missing.gz").string();
  EXPECT_TRUE(contains(error_of([&] { pack_images(idx); }), "does not exist"));
  EXPECT_FALSE(fs::exists(idx.output));
  fs::remove_all(dir);
}

TEST(ImagePack, ReducedFashionMnistKeepsTheRequestedShare) {
  const fs::path fm = kFashionMnistDir;
  if (!fs::exists(fm / "t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const fs::path dir = testsupport::temp_dir("pack-fmnist");
  PackImagesOptions o;
  o.idx_images = (fm / "t10k-images-idx3-ubyte.gz").string();
  o.idx_labels = (fm / "t10k-labels-idx1-ubyte.gz").string();
  o.class_names = fashion_mnist_class_names();
  o.max_per_class = 20;
  o.output = (dir / "store").string();
  const PackImagesSummary s = pack_images(o);
  EXPECT_EQ(s.meta.records, 200);
  EXPECT_EQ(s.meta.classes, 10);
  EXPECT_NEAR(s.meta.mean[0], 0.286, 0.03);  // Fashion-MNIST's well-known mean
  ImageSourceConfig c;
  c.path = o.output;
  c.batch_size = 50;
  c.repeat = 3;
  auto src = open_image_source(c);
  EXPECT_EQ(src->batches_per_epoch(), 12);
  std::vector<int64_t> per_class(10, 0);
  ImageBatch b;
  for (int k = 0; k < 12; ++k) {
    src->next_batch(b);
    for (int32_t label : b.labels) ++per_class[label];
  }
  for (int64_t n : per_class) EXPECT_EQ(n, 60);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aiscale::data
