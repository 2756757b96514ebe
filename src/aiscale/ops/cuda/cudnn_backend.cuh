// Small pieces of cuDNN's backend (graph) API shared by the code that builds operation
// graphs directly (no cuDNN frontend: it is not packaged for Debian): an owning
// descriptor, the error text, and a cache of variant packs. Include only where
// AISCALE_HAVE_CUDNN is set, after <cudnn.h>.
#pragma once
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::cuda::cudnn_backend {

// cuDNN's status text with the library's last detailed message.
inline std::string message(cudnnStatus_t st) {
  std::string m = cudnnGetErrorString(st);
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0]) m += std::string(": ") + detail;
  return m;
}

// Throws "<who>: <what> failed (<cuDNN's message>)" unless st is success.
inline void check(cudnnStatus_t st, const char* who, const std::string& what) {
  if (st != CUDNN_STATUS_SUCCESS) throw Error(std::string(who) + ": " + what + " failed (" + message(st) + ")");
}

// cuDNN's element type for a dtype.
inline cudnnDataType_t data_type(DType t) {
  return t == DType::f32 ? CUDNN_DATA_FLOAT : t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cuDNN graph", "creating a descriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename V>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
           const V* v, const char* what) {
    check(cudnnBackendSetAttribute(d_, name, type, n, v), "cuDNN graph", std::string("setting ") + what);
  }
  void set_desc(cudnnBackendAttributeName_t name, const Desc& other, const char* what) {
    cudnnBackendDescriptor_t p = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, what);
  }
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  void finalize(const std::string& what) {
    check(cudnnBackendFinalize(d_), "cuDNN graph", "finalising " + what);
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Variant packs of one execution plan by their pointers: a model calls a plan with one set
// of buffers per layer, the same every step, so each pack is built once and a call
// allocates nothing. Up to 15 data pointers and the workspace.
class PackCache {
 public:
  using Key = std::array<void*, 16>;

  template <size_t N>
  cudnnBackendDescriptor_t get(const std::array<int64_t, N>& uids, const std::array<void*, N>& ptrs,
                               void* workspace) {
    static_assert(N < std::tuple_size_v<Key>, "a pack holds the pointers and the workspace");
    constexpr size_t kMaxPacks = 256;  // bounds the cache for callers that vary their buffers
    Key key{};
    std::copy(ptrs.begin(), ptrs.end(), key.begin());
    key[N] = workspace;
    auto it = packs_.find(key);
    if (it == packs_.end()) {
      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(N), uids.data(),
               "variant pack uids");
      pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(N), key.data(),
               "variant pack pointers");
      pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
               "variant pack workspace");
      pack.finalize("variant pack");
      if (packs_.size() >= kMaxPacks) packs_.clear();
      it = packs_.emplace(key, std::move(pack)).first;
    }
    return it->second.get();
  }

 private:
  std::map<Key, Desc> packs_;
};

// The global index of the engine behind an engine configuration (-1 if unreadable).
inline int64_t engine_index(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               1, &n, &e) == CUDNN_STATUS_SUCCESS)
    cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  return index;
}

// The engine configurations cuDNN's heuristics list for a finalised operation graph in
// `mode` (ranked best first); empty when the mode lists none for it.
inline std::vector<Desc> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  std::vector<Desc> list;
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) return list;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               0, &count, nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return list;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    list.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(list.back().get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               count, &got, raw.data()) != CUDNN_STATUS_SUCCESS)
    got = 0;
  list.resize(size_t(std::max<int64_t>(0, std::min(got, count))));
  return list;
}

}  // namespace aiscale::cuda::cudnn_backend
