// LMDB and RAM record readers, and staging into node-local storage; see record_reader.h.
#include "aiscale/data/images/record_reader.h"

#include <lmdb.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <vector>

#include "aiscale/core/error.h"

namespace aiscale::data {
namespace fs = std::filesystem;
namespace {

class LmdbEnv {
 public:
  explicit LmdbEnv(const std::string& path) : path_(path) {
    if (!fs::exists(path))
      fail("image store '{}' does not exist; create it with `aiscale data pack-images`", path);
    if (!fs::is_directory(path) || !fs::exists(fs::path(path) / "data.mdb"))
      fail("'{}' is not an image store: an LMDB directory holding data.mdb is expected (the "
           "--output of `aiscale data pack-images`)", path);
    check(mdb_env_create(&env_), "create");
    check(mdb_env_set_maxreaders(env_, 4096), "set readers");
    // Read-only and lock-free (the store is never written after its rename), one read
    // transaction per worker thread, no read-ahead for random access.
    const int rc = mdb_env_open(env_, path.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD, 0);
    if (rc != 0)
      fail("'{}' cannot be opened as an LMDB ({}); is it an image store written by `aiscale data "
           "pack-images`?", path, mdb_strerror(rc));
    MDB_txn* txn = nullptr;
    check(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn), "begin");
    const int open_rc = mdb_dbi_open(txn, nullptr, 0, &dbi_);
    MDB_val key{std::char_traits<char>::length(kImageStoreMetaKey), const_cast<char*>(kImageStoreMetaKey)};
    MDB_val value{};
    const int get_rc = open_rc == 0 ? mdb_get(txn, dbi_, &key, &value) : open_rc;
    if (get_rc == MDB_NOTFOUND) {
      mdb_txn_abort(txn);
      fail("'{}' is an LMDB without the '{}' metadata key: it was written by another tool. Pack "
           "the images with `aiscale data pack-images` (from an image folder or IDX files)",
           path, kImageStoreMetaKey);
    }
    if (get_rc != 0) {
      mdb_txn_abort(txn);
      fail("cannot read the metadata of image store '{}': {}", path, mdb_strerror(get_rc));
    }
    const std::string text(static_cast<const char*>(value.mv_data), value.mv_size);
    mdb_txn_abort(txn);
    meta_ = ImageStoreMeta::from_json(text, path);
  }
  ~LmdbEnv() { mdb_env_close(env_); }
  LmdbEnv(const LmdbEnv&) = delete;
  LmdbEnv& operator=(const LmdbEnv&) = delete;

  MDB_env* env() const { return env_; }
  MDB_dbi dbi() const { return dbi_; }
  const ImageStoreMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }

  void check(int rc, const char* what) const {
    if (rc != 0) fail("LMDB {} failed for image store '{}': {}", what, path_, mdb_strerror(rc));
  }

 private:
  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
  ImageStoreMeta meta_;
};

class LmdbHandle final : public RecordReader::Handle {
 public:
  explicit LmdbHandle(const LmdbEnv& env) : env_(env) {
    env.check(mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &txn_), "begin");
  }
  ~LmdbHandle() override { mdb_txn_abort(txn_); }
  bool get(int64_t index, const uint8_t*& data, size_t& size) override {
    const std::string key = record_key(index);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{};
    const int rc = mdb_get(txn_, env_.dbi(), &k, &v);
    if (rc == MDB_NOTFOUND) return false;
    env_.check(rc, "get");
    data = static_cast<const uint8_t*>(v.mv_data);
    size = v.mv_size;
    return true;
  }

 private:
  const LmdbEnv& env_;
  MDB_txn* txn_ = nullptr;
};

class LmdbReader final : public RecordReader {
 public:
  explicit LmdbReader(const std::string& path) : env_(path) { meta_ = env_.meta(); }
  std::unique_ptr<Handle> open_handle() override { return std::make_unique<LmdbHandle>(env_); }

 private:
  LmdbEnv env_;
};

// Every record copied into one buffer: no page faults or disk reads while training.
class RamReader final : public RecordReader {
 public:
  explicit RamReader(const std::string& path) {
    LmdbEnv env(path);
    meta_ = env.meta();
    LmdbHandle handle(env);
    offsets_.reserve(meta_.records + 1);
    offsets_.push_back(0);
    for (int64_t i = 0; i < meta_.records; ++i) {
      const uint8_t* data = nullptr;
      size_t size = 0;
      if (handle.get(i, data, size)) bytes_.insert(bytes_.end(), data, data + size);
      offsets_.push_back(bytes_.size());  // a missing record stays empty (a corrupt one)
    }
  }

  std::unique_ptr<Handle> open_handle() override { return std::make_unique<View>(*this); }

 private:
  class View final : public Handle {
   public:
    explicit View(const RamReader& r) : r_(r) {}
    bool get(int64_t index, const uint8_t*& data, size_t& size) override {
      if (index < 0 || index >= static_cast<int64_t>(r_.offsets_.size()) - 1) return false;
      data = r_.bytes_.data() + r_.offsets_[index];
      size = r_.offsets_[index + 1] - r_.offsets_[index];
      return size > 0;
    }

   private:
    const RamReader& r_;
  };

  std::vector<uint8_t> bytes_;
  std::vector<size_t> offsets_;
};

}  // namespace

std::unique_ptr<RecordReader> open_record_reader(const std::string& path, bool ram) {
  if (ram) return std::make_unique<RamReader>(path);
  return std::make_unique<LmdbReader>(path);
}

std::string stage_store_locally(const std::string& path, const std::string& local_dir) {
  const fs::path data = fs::path(path) / "data.mdb";
  if (!fs::exists(data))
    fail("image store '{}' does not exist or is not an LMDB directory; create it with `aiscale "
         "data pack-images`", path);
  if (local_dir.empty()) fail("stage 'local:DIR' needs a directory, e.g. local:/tmp/aiscale-stage");
  std::error_code ec;
  const uintmax_t size = fs::file_size(data);
  const auto stamp = fs::last_write_time(data).time_since_epoch().count();
  const std::string identity = fs::absolute(path).lexically_normal().string() + "|" +
                               std::to_string(size) + "|" + std::to_string(stamp);
  const std::string name = fs::absolute(path).lexically_normal().filename().string() + "-" +
                           fmt::format("{:016x}", std::hash<std::string>{}(identity));
  const fs::path target = fs::path(local_dir) / name;
  if (fs::exists(target / "data.mdb") && fs::file_size(target / "data.mdb", ec) == size)
    return target.string();
  fs::create_directories(local_dir, ec);
  if (ec) fail("cannot create the staging folder '{}': {}", local_dir, ec.message());
  const fs::path temp = fs::path(local_dir) / (name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  if (!ec) fs::copy_file(data, temp / "data.mdb", ec);
  if (ec) {
    fs::remove_all(temp);
    fail("cannot stage image store '{}' into '{}': {}; check the space and permissions there",
         path, local_dir, ec.message());
  }
  fs::rename(temp, target, ec);
  if (ec) {  // another rank of this node staged it first
    fs::remove_all(temp);
    if (!fs::exists(target / "data.mdb"))
      fail("cannot stage image store '{}' into '{}': {}", path, target.string(), ec.message());
  }
  return target.string();
}

}  // namespace aiscale::data
