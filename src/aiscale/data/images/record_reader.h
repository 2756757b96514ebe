// Where an image source reads its records' bytes from: the LMDB's memory map, or a copy
// of every record in RAM (stage = "ram"). One Handle per worker thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/data/images/store_format.h"

namespace aiscale::data {

class RecordReader {
 public:
  class Handle {
   public:
    virtual ~Handle() = default;
    // The value of record `index`, valid until the next get() on this handle; false when
    // the store has no such record.
    virtual bool get(int64_t index, const uint8_t*& data, size_t& size) = 0;
  };

  virtual ~RecordReader() = default;
  virtual std::unique_ptr<Handle> open_handle() = 0;
  const ImageStoreMeta& meta() const { return meta_; }

 protected:
  ImageStoreMeta meta_;
};

// Opens the store at `path` (an LMDB written by pack-images) read-only, without locks.
// ram: copy every record into memory and close the LMDB. Throws aiscale::Error naming
// the path for a missing store, something that is not an LMDB, or a foreign LMDB.
std::unique_ptr<RecordReader> open_record_reader(const std::string& path, bool ram);

// stage = "local:DIR": copies the store into DIR (once per node: an existing copy of the
// same size is reused; written aside and renamed) and returns the copy's path.
std::string stage_store_locally(const std::string& path, const std::string& local_dir);

}  // namespace aiscale::data
