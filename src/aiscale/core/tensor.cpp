#include "aiscale/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "aiscale/core/error.h"

#ifdef AISCALE_HAVE_CUDA
#include "aiscale/core/cuda_memory.h"
#endif

namespace aiscale {

Shape::Shape(std::initializer_list<int64_t> d) {
  AISCALE_CHECK(d.size() <= kMaxDims, "too many dims: {}", d.size());
  for (int64_t v : d) dims[ndim++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

bool Tensor::contiguous() const {
  int64_t expect = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    if (shape.dims[i] != 1 && strides[i] != expect) return false;
    expect *= shape.dims[i];
  }
  return true;
}

float* Tensor::f32() const {
  AISCALE_CHECK(dtype == DType::f32, "tensor is {}, not fp32", dtype_name(dtype));
  return static_cast<float*>(data);
}

uint16_t* Tensor::u16() const {
  AISCALE_CHECK(dtype != DType::f32, "tensor is fp32, not a 16-bit type");
  return static_cast<uint16_t*>(data);
}

Tensor Tensor::contiguous_view(void* data, Shape s, DType t, Device d) {
  Tensor out;
  out.data = data;
  out.shape = s;
  out.dtype = t;
  out.device = d;
  int64_t stride = 1;
  for (int i = s.ndim - 1; i >= 0; --i) {
    out.strides[i] = stride;
    stride *= s.dims[i];
  }
  return out;
}

Tensor Tensor::reshape(Shape s) const {
  AISCALE_CHECK(contiguous(), "reshape of a non-contiguous tensor");
  AISCALE_CHECK(s.numel() == numel(), "reshape {} -> {} changes the element count", shape.str(),
                s.str());
  return contiguous_view(data, s, dtype, device);
}

size_t TensorLayout::add(std::string name, Shape shape, DType dtype) {
  size_t offset = (total_bytes + kAlign - 1) / kAlign * kAlign;
  entries.push_back({std::move(name), shape, dtype, offset});
  total_bytes = offset + static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return entries.size() - 1;
}

const TensorLayout::Entry* TensorLayout::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

Arena::Arena(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    size_t rounded = (bytes + TensorLayout::kAlign - 1) / TensorLayout::kAlign * TensorLayout::kAlign;
    data_ = std::aligned_alloc(TensorLayout::kAlign, rounded);
    if (!data_) fail("out of host memory allocating {:.1f} MiB", bytes / 1048576.0);
  } else {
#ifdef AISCALE_HAVE_CUDA
    data_ = cuda_device_alloc(bytes);
#else
    fail("this aiscale was built without CUDA; rebuild with the 'cuda' preset");
#endif
  }
}

Arena::~Arena() { release(); }

void Arena::release() {
  if (!data_) return;
  if (device_ == Device::cpu) {
    std::free(data_);
  } else {
#ifdef AISCALE_HAVE_CUDA
    cuda_device_free(data_);
#endif
  }
  data_ = nullptr;
  bytes_ = 0;
}

Arena::Arena(Arena&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Tensor Arena::view(const TensorLayout::Entry& e) const {
  AISCALE_CHECK(e.offset_bytes + static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype) <= bytes_,
                "view '{}' outside its arena", e.name);
  return Tensor::contiguous_view(static_cast<char*>(data_) + e.offset_bytes, e.shape, e.dtype,
                                 device_);
}

void Arena::zero() {
  if (!data_) return;
  if (device_ == Device::cpu) {
    std::memset(data_, 0, bytes_);
  } else {
#ifdef AISCALE_HAVE_CUDA
    cuda_device_zero(data_, bytes_);
#endif
  }
}

}  // namespace aiscale
