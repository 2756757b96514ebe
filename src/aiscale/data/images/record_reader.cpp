// LMDB and RAM record readers, and staging into node-local storage; see record_reader.h.
#include "aiscale/data/images/record_reader.h"

#include <lmdb.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "aiscale/core/error.h"

namespace aiscale::data {
namespace fs = std::filesystem;
namespace {

// A valid LMDB file holds at least its two meta pages, and a page is at least 4 KiB.
constexpr uintmax_t kSmallestLmdbFile = 2 * 4096;

std::string repack_fix() {
  return "copy the store again from where it was packed, or re-pack it with `aiscale data "
         "pack-images`";
}

// The store's data file must be at least as long as the two meta pages, before LMDB opens it.
uintmax_t check_data_file_before_open(const std::string& store) {
  const std::string file = (fs::path(store) / "data.mdb").string();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    fail("image store '{}': '{}' is not a regular file; re-pack the store with `aiscale data "
         "pack-images`", store, file);
  const uintmax_t length = fs::file_size(file, ec);
  if (ec) fail("image store '{}': cannot read the size of '{}': {}", store, file, ec.message());
  if (length < kSmallestLmdbFile)
    fail("image store '{}' is truncated: '{}' ends at byte {}, shorter than LMDB's two header "
         "pages ({} bytes at least); {}", store, file, length, kSmallestLmdbFile, repack_fix());
  return length;
}

// mdb_env_open reads the meta pages with pread; every other page is read through the memory
// map, where a page past the end of the file is a SIGBUS that kills the process without a
// word. So after the open and before any transaction, the newest meta page's last page must
// lie inside the file (LMDB refuses pages beyond that last page itself).
void check_data_file_after_open(MDB_env* env, const std::string& store, uintmax_t length) {
  MDB_envinfo info{};
  MDB_stat stat{};
  if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &stat) != 0 || stat.ms_psize == 0)
    fail("image store '{}': LMDB cannot describe its data file; {}", store, repack_fix());
  const uint64_t page = stat.ms_psize;
  const uint64_t pages = static_cast<uint64_t>(info.me_last_pgno) + 1;
  const bool overflows = pages > UINT64_MAX / page;
  if (overflows || length < pages * page) {
    const std::string file = (fs::path(store) / "data.mdb").string();
    fail("image store '{}' is truncated: '{}' ends at byte {}, but its header says it runs to "
         "byte {} ({} pages of {} bytes); the file was cut short (an interrupted copy or pack): "
         "{}", store, file, length,
         overflows ? std::string("beyond 2^64") : std::to_string(pages * page), pages, page,
         repack_fix());
  }
}

class LmdbEnv {
 public:
  explicit LmdbEnv(const std::string& path) : path_(path) {
    if (!fs::exists(path))
      fail("image store '{}' does not exist; create it with `aiscale data pack-images`", path);
    if (!fs::is_directory(path) || !fs::exists(fs::path(path) / "data.mdb"))
      fail("'{}' is not an image store: an LMDB directory holding data.mdb is expected (the "
           "--output of `aiscale data pack-images`)", path);
    check(mdb_env_create(&env_), "create");
    try {
      open_and_read_meta(path);
    } catch (...) {
      mdb_env_close(env_);  // the destructor does not run for a constructor that throws
      throw;
    }
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
  void open_and_read_meta(const std::string& path) {
    const uintmax_t length = check_data_file_before_open(path);
    check(mdb_env_set_maxreaders(env_, 4096), "set readers");
    // Read-only and lock-free (the store is never written after its rename), one read
    // transaction per worker thread, no read-ahead for random access.
    const int rc = mdb_env_open(env_, path.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD, 0);
    if (rc != 0)
      fail("'{}' cannot be opened as an LMDB ({}); is it an image store written by `aiscale data "
           "pack-images`? If it is, its data.mdb ({} bytes) is damaged: {}", path,
           mdb_strerror(rc), length, repack_fix());
    check_data_file_after_open(env_, path, length);
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
  { LmdbEnv source(path); }  // a truncated or foreign store is refused before it is copied
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
