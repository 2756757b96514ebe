// The image store's metadata, record layout and writer; see store_format.h.
#include "aiscale/data/images/store_format.h"

#include <lmdb.h>
#include <unistd.h>

#include <filesystem>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::data {
namespace fs = std::filesystem;

nlohmann::json ImageStoreMeta::to_json() const {
  nlohmann::json j;
  j["format"] = kImageStoreFormat;
  j["version"] = kImageStoreVersion;
  j["records"] = records;
  j["classes"] = classes;
  j["class_names"] = class_names;
  j["channels"] = channels;
  if (height > 0 && width > 0)
    j["size"] = {{"height", height}, {"width", width}};
  else
    j["size"] = "mixed";
  j["mean"] = mean;
  j["std"] = std;
  j["source"] = source;
  j["created"] = created;
  return j;
}

ImageStoreMeta ImageStoreMeta::from_json(const std::string& text, const std::string& store) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kImageStoreFormat)
    fail("'{}' is an LMDB whose '{}' key is not aiscale image metadata; it was not written by "
         "`aiscale data pack-images`: pack the images with it", store, kImageStoreMetaKey);
  const int version = j.value("version", 0);
  if (version != kImageStoreVersion)
    fail("image store '{}' has format version {}; this aiscale reads version {}: repack it with "
         "this version's `aiscale data pack-images`", store, version, kImageStoreVersion);
  ImageStoreMeta m;
  try {
    m.records = j.at("records").get<int64_t>();
    m.classes = j.at("classes").get<int64_t>();
    m.class_names = j.at("class_names").get<std::vector<std::string>>();
    m.channels = j.at("channels").get<int64_t>();
    if (j.at("size").is_object()) {
      m.height = j["size"].at("height").get<int64_t>();
      m.width = j["size"].at("width").get<int64_t>();
    }
    m.mean = j.at("mean").get<std::vector<float>>();
    m.std = j.at("std").get<std::vector<float>>();
    m.source = j.value("source", "");
    m.created = j.value("created", "");
  } catch (const nlohmann::json::exception& e) {
    fail("image store '{}' has malformed metadata ({}); repack it with `aiscale data pack-images`",
         store, e.what());
  }
  if (m.records < 0 || m.classes < 1 || (m.channels != 1 && m.channels != 3) ||
      static_cast<int64_t>(m.mean.size()) != m.channels ||
      static_cast<int64_t>(m.std.size()) != m.channels)
    fail("image store '{}' has inconsistent metadata ({} records, {} classes, {} channels, {} "
         "means); repack it with `aiscale data pack-images`", store, m.records, m.classes,
         m.channels, m.mean.size());
  return m;
}

std::string record_key(int64_t index) {
  std::string key(8, '\0');
  for (int i = 0; i < 8; ++i) key[i] = static_cast<char>((static_cast<uint64_t>(index) >> (56 - 8 * i)) & 0xff);
  return key;
}

namespace {
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
void check(int rc, const char* what, const std::string& path) {
  if (rc != 0) fail("LMDB {} failed for '{}': {}", what, path, mdb_strerror(rc));
}
}  // namespace

void write_record_header(const RecordHeader& h, uint8_t* out) {
  put_u32(out, static_cast<uint32_t>(h.label));
  out[4] = static_cast<uint8_t>(h.encoding);
  out[5] = h.channels;
  out[6] = out[7] = 0;
  put_u32(out + 8, h.width);
  put_u32(out + 12, h.height);
}

bool read_record_header(const uint8_t* value, size_t size, RecordHeader& h) {
  if (size < kRecordHeaderBytes || value[4] > 2) return false;
  h.label = static_cast<int32_t>(get_u32(value));
  h.encoding = static_cast<ImageEncoding>(value[4]);
  h.channels = value[5];
  h.width = get_u32(value + 8);
  h.height = get_u32(value + 12);
  return true;
}

ImageStoreWriter::ImageStoreWriter(const std::string& dir, size_t expected_bytes)
    : dir_(fs::path(dir).lexically_normal().string()) {
  while (!dir_.empty() && dir_.back() == '/') dir_.pop_back();
  if (fs::exists(dir_))
    fail("output '{}' already exists; remove it or choose another --output", dir_);
  const fs::path parent = fs::absolute(dir_).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail("cannot create the folder of output '{}': {}", dir_, ec.message());
  temp_dir_ = dir_ + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(temp_dir_);
  fs::create_directories(temp_dir_, ec);
  if (ec) fail("cannot create '{}': {}; check the output folder is writable", temp_dir_, ec.message());
  MDB_env* env = nullptr;
  check(mdb_env_create(&env), "create", temp_dir_);
  env_ = env;
  map_size_ = expected_bytes * 2 + (size_t{1} << 30);
  try {
    check(mdb_env_set_mapsize(env, map_size_), "set map size", temp_dir_);
    // The store is written once by one process: no sync per commit (finish() syncs).
    check(mdb_env_open(env, temp_dir_.c_str(), MDB_NOSYNC, 0644), "open", temp_dir_);
  } catch (...) {  // the destructor does not run for a constructor that throws
    mdb_env_close(env);
    fs::remove_all(temp_dir_, ec);
    throw;
  }
}

ImageStoreWriter::~ImageStoreWriter() {
  if (txn_ != nullptr) mdb_txn_abort(static_cast<MDB_txn*>(txn_));
  if (env_ != nullptr) mdb_env_close(static_cast<MDB_env*>(env_));
  if (!temp_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(temp_dir_, ec);
  }
}

void ImageStoreWriter::grow_map(size_t at_least) {
  commit_batch();
  while (map_size_ < at_least) map_size_ *= 2;
  check(mdb_env_set_mapsize(static_cast<MDB_env*>(env_), map_size_), "grow map", temp_dir_);
}

void ImageStoreWriter::commit_batch() {
  if (txn_ == nullptr) return;
  MDB_txn* txn = static_cast<MDB_txn*>(txn_);
  txn_ = nullptr;
  check(mdb_txn_commit(txn), "commit", temp_dir_);
  txn_bytes_ = 0;
}

// A write transaction into txn_; the database opened in the first.
void ImageStoreWriter::begin_transaction() {
  MDB_txn* txn = nullptr;
  check(mdb_txn_begin(static_cast<MDB_env*>(env_), nullptr, 0, &txn), "begin", temp_dir_);
  txn_ = txn;
  if (records_ == 0) {
    MDB_dbi dbi;
    check(mdb_dbi_open(txn, nullptr, 0, &dbi), "open database", temp_dir_);
    dbi_ = dbi;
  }
}

void ImageStoreWriter::add(const RecordHeader& header, const uint8_t* bytes, size_t size) {
  // Room for the value and B-tree overhead, with slack; grown between transactions.
  const size_t need = written_bytes_ + size + 4096;
  if (need > map_size_ / 10 * 8) grow_map(need * 2);
  if (txn_bytes_ > (size_t{64} << 20)) commit_batch();
  if (txn_ == nullptr) begin_transaction();
  value_.resize(kRecordHeaderBytes + size);
  write_record_header(header, value_.data());
  if (size > 0) std::copy(bytes, bytes + size, value_.begin() + kRecordHeaderBytes);
  std::string key = record_key(records_);
  MDB_val k{key.size(), key.data()}, v{value_.size(), value_.data()};
  check(mdb_put(static_cast<MDB_txn*>(txn_), dbi_, &k, &v, MDB_APPEND), "put", temp_dir_);
  ++records_;
  txn_bytes_ += value_.size();
  written_bytes_ += value_.size() + 64;
}

void ImageStoreWriter::finish(ImageStoreMeta meta) {
  meta.records = records_;
  const std::string text = meta.to_json().dump();
  grow_map(written_bytes_ + text.size() + (size_t{1} << 20));
  begin_transaction();
  auto* env = static_cast<MDB_env*>(env_);
  std::string key = kImageStoreMetaKey;
  MDB_val k{key.size(), key.data()}, v{text.size(), const_cast<char*>(text.data())};
  check(mdb_put(static_cast<MDB_txn*>(txn_), dbi_, &k, &v, 0), "put metadata", temp_dir_);
  commit_batch();
  check(mdb_env_sync(env, 1), "sync", temp_dir_);
  mdb_env_close(env);
  env_ = nullptr;
  // The lock file belongs to the writer; readers open the store without locking.
  std::error_code ec;
  fs::remove(fs::path(temp_dir_) / "lock.mdb", ec);
  fsync_directory(temp_dir_);
  fs::rename(temp_dir_, dir_, ec);
  if (ec) fail("cannot rename '{}' to '{}': {}", temp_dir_, dir_, ec.message());
  temp_dir_.clear();
  fsync_directory(fs::absolute(dir_).parent_path().string());
}

}  // namespace aiscale::data
