// Tensor views and the arena they live in. A Tensor never owns memory: every buffer
// is carved out of an Arena allocated once at start-up (nothing allocates in a step).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/dtype.h"

namespace aiscale {

enum class Device : uint8_t { cpu, cuda };

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;
  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t numel() const;
  int64_t operator[](int i) const { return dims[i]; }
  bool operator==(const Shape& o) const;
  std::string str() const;  // "(B=?, ...)" style: "(8, 128, 256)"
};

struct Tensor {
  void* data = nullptr;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // in elements
  DType dtype = DType::f32;
  Device device = Device::cpu;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool contiguous() const;
  // Typed access; throws when the dtype does not match.
  float* f32() const;
  uint16_t* u16() const;
  // Same memory, new contiguous shape with the same element count.
  Tensor reshape(Shape s) const;
  static Tensor contiguous_view(void* data, Shape s, DType t, Device d);
};

// A named list of buffers laid out back to back in one allocation.
struct TensorLayout {
  struct Entry {
    std::string name;
    Shape shape;
    DType dtype;
    size_t offset_bytes;
  };
  std::vector<Entry> entries;
  size_t total_bytes = 0;
  static constexpr size_t kAlign = 64;  // cache line / vector width

  size_t add(std::string name, Shape shape, DType dtype = DType::f32);  // returns index
  const Entry* find(const std::string& name) const;
};

// One aligned block of memory on a device.
class Arena {
 public:
  Arena() = default;
  Arena(size_t bytes, Device device);
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  Tensor view(const TensorLayout::Entry& e) const;
  // Zero the whole block.
  void zero();

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

}  // namespace aiscale
