#include "aiscale/core/fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"

namespace aiscale {

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void atomic_write_file(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  // Unique per process and thread: two threads may write the same file at once (a
  // rendezvous store's key); the last rename wins, neither sees a half-written file.
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000000);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot write '{}': {}", tmp, std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("writing '{}' failed: {} (disk full?)", tmp, std::strerror(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("flushing '{}' failed: {}", tmp, std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot move '{}' into place: {}", path, std::strerror(err));
  }
  fsync_directory(fs::path(path).parent_path().string());
}

std::string read_file(const std::string& path) {
  validate::regular_file(path, "file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}': no such file or no permission", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::vector<std::string>> files_or_folder(
    const std::string& path, std::initializer_list<std::string_view> extensions, bool recursive) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  auto wanted = [&](const fs::directory_entry& e) {
    if (!e.is_regular_file()) return false;
    for (std::string_view x : extensions)
      if (e.path().extension() == x) return true;
    return false;
  };
  if (fs::is_directory(path, ec)) {
    if (recursive) {
      for (const auto& e : fs::recursive_directory_iterator(path, ec))
        if (wanted(e)) out.push_back(e.path().string());
    } else {
      for (const auto& e : fs::directory_iterator(path, ec))
        if (wanted(e)) out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
  } else if (fs::is_regular_file(path, ec)) {
    out.push_back(path);
  } else {
    return std::nullopt;
  }
  return out;
}

void check_output_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) fail("{}: the file name is empty: give a file to write", what);
  if (fs::is_directory(path, ec))
    fail("{} '{}' is a folder: give a file name in it, e.g. {}", what, path,
         (fs::path(path) / "results.jsonl").string());
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, ec))
    fail("{} '{}': folder '{}' does not exist; create it or choose another file", what, path, dir);
  if (fs::exists(path, ec)) {
    // O_NONBLOCK: a FIFO without a reader fails at once instead of blocking here.
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
      fail("{} '{}': the file exists and cannot be written ({}); choose another file or fix its "
           "permissions", what, path, std::strerror(errno));
    ::close(fd);
    return;
  }
  const std::string probe = (fs::path(dir) / (".aiscale-write-test." + std::to_string(::getpid())))
                                .string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    fail("{} '{}': cannot create a file in folder '{}' ({}); choose a folder you can write to",
         what, path, dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

static std::string utc_format(const char* format) {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}
std::string utc_iso8601() { return utc_format("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_compact() { return utc_format("%Y%m%d-%H%M%S"); }

}  // namespace aiscale
