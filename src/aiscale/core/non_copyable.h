// A base for classes that own a resource (a file, a handle, a thread, installed signal
// handlers) and so are neither copied nor moved: `class Meter : NonCopyable { ... };`.
#pragma once

namespace aiscale {

class NonCopyable {
 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;

 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;
};

}  // namespace aiscale
