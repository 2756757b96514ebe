// File store: one file per key in a folder every rank can read. A value is written
// aside and renamed into place (a reader sees all of it or nothing); add holds an
// exclusive lock (flock) on the folder's lock file (.aiscale-store.lock, made by the
// first add), so that concurrent adds on one key are not lost.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/store.h"

namespace aiscale::parallel {
namespace {

namespace fs = std::filesystem;

class FileStore final : public Store {
 public:
  // The folder is not created here: on a node where the path is not shared, a folder
  // made by a waiting rank would hide the mistake until the timeout.
  FileStore(std::string folder, double timeout_s) : Store(timeout_s), folder_(std::move(folder)) {}

  void set(const std::string& key, std::string_view value) override {
    require_folder();
    atomic_write_file(path_of(key), value);
  }

  std::optional<std::string> try_get(const std::string& key) override {
    std::ifstream in(path_of(key), std::ios::binary);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  int64_t add(const std::string& key, int64_t delta) override {
    require_folder();
    Lock lock(*this);
    int64_t value = 0;
    if (auto old = try_get(key)) {
      char* end = nullptr;
      value = std::strtoll(old->c_str(), &end, 10);
      if (old->empty() || *end != '\0')
        fail("file store key '{}' ({}) holds '{}', not a counter: one key serves either set or "
             "add", key, path_of(key), *old);
    }
    value += delta;
    atomic_write_file(path_of(key), std::to_string(value));
    return value;
  }

  std::string where() const override { return "file store " + folder_; }

 private:
  void require_folder() const {
    if (!fs::is_directory(folder_))
      fail("file store: the folder '{}' does not exist: create it on a filesystem every node "
           "shares", folder_);
  }

  // flock on a file of the folder; released (and the descriptor closed) on scope exit.
  class Lock {
   public:
    explicit Lock(const FileStore& store) {
      const std::string path = store.folder_ + "/.aiscale-store.lock";
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
      if (fd_ < 0)
        fail("file store: cannot open the lock file '{}': {} (is the folder writable?)", path,
             std::strerror(errno));
      while (::flock(fd_, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd_);
        fail("file store: cannot lock '{}': {} (the filesystem must support flock)", path,
             std::strerror(err));
      }
    }
    ~Lock() { ::close(fd_); }  // closing releases the lock
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_ = -1;
  };

  // A file name for any key: [A-Za-z0-9._-] stay, everything else becomes %XX (so "/" in
  // a prefixed key never makes a subfolder and no key starts with a dot file's ".").
  std::string path_of(const std::string& key) const {
    static const char* hex = "0123456789ABCDEF";
    std::string name;
    for (unsigned char c : key) {
      const bool plain = std::isalnum(c) || c == '_' || c == '-' || (c == '.' && !name.empty());
      if (plain) {
        name += static_cast<char>(c);
      } else {
        name += '%';
        name += hex[c >> 4];
        name += hex[c & 15];
      }
    }
    if (name.empty()) fail("file store: empty key");
    return folder_ + "/" + name;
  }

  std::string folder_;
};

}  // namespace

std::unique_ptr<Store> make_file_store(const std::string& folder, double timeout_s) {
  return std::make_unique<FileStore>(folder, timeout_s);
}

}  // namespace aiscale::parallel
