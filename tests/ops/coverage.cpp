// The `coverage` mode of test_ops: the op vocabulary (op.h) against every backend's
// coverage table and against the harness's families. It fails when an op is implemented
// by a backend but checked by no family of that backend, or when an op of the host table
// has no function in a host backend. (A backend's table missing an op does not compile:
// each has a static_assert.)
#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"
#if AISCALE_TEST_OPS_CUDA
#include "cuda/cuda_harness.h"
#endif

namespace aiscale::ops::testing {
namespace {

std::string dtypes_text(DTypeSet s) {
  if (s.empty()) return "-";
  std::string text;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    if (!s.has(t)) continue;
    if (!text.empty()) text += ",";
    text += std::string(dtype_name(t));
  }
  return text;
}

template <class Family>
std::string family_of(const std::vector<Family>& families, Op op) {
  for (const Family& f : families) {
    for (Op o : f.ops) {
      if (o == op) return f.name;
    }
  }
  return {};
}

}  // namespace

int run_coverage_mode() {
  const std::vector<OpFamily> host = all_families();
#if AISCALE_TEST_OPS_CUDA
  const std::vector<CudaFamily> cuda = cuda_families();
#endif
  int problems = 0;
  std::printf("%-22s %-14s %-14s %-22s %s\n", "op", "reference", "cpu", "cuda", "harness family");
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    const std::string name(op_name(op));
    const OpCoverage& ref = coverage(BackendId::reference, op);
    const OpCoverage& cpu = coverage(BackendId::cpu, op);
    const OpCoverage& gpu = coverage(BackendId::cuda, op);
    std::string families;
    const std::string host_family = family_of(host, op);
    if (!host_family.empty()) families = "host: " + host_family;
    if ((!ref.dtypes.empty() || !cpu.dtypes.empty()) && host_family.empty()) {
      std::printf("MISSING %s: a host backend implements it, no host family of tests/ops checks it\n",
                  name.c_str());
      ++problems;
    }
    if (in_host_table(op)) {
      for (const Backend* be : {&reference_backend(), &cpu_backend()}) {
        if (host_entry(*be, op) == nullptr) {
          std::printf("MISSING %s: no function in the %s backend's table\n", name.c_str(), be->name);
          ++problems;
        }
      }
    }
#if AISCALE_TEST_OPS_CUDA
    const std::string cuda_family = family_of(cuda, op);
    if (!cuda_family.empty()) families += (families.empty() ? "" : "; ") + ("cuda: " + cuda_family);
    if (!gpu.dtypes.empty() && cuda_family.empty()) {
      std::printf("MISSING %s: the cuda backend implements it, no family of tests/ops/cuda checks it\n",
                  name.c_str());
      ++problems;
    }
#else
    if (!gpu.dtypes.empty()) families += (families.empty() ? "" : "; ") + std::string("cuda: (not built)");
#endif
    std::printf("%-22s %-14s %-14s %-22s %s\n", name.c_str(), dtypes_text(ref.dtypes).c_str(),
                dtypes_text(cpu.dtypes).c_str(), dtypes_text(gpu.dtypes).c_str(), families.c_str());
  }
  std::printf("%s: %d ops, %d problems%s\n", problems ? "FAILED" : "OK", kOpCount, problems,
              backend_compiled(BackendId::cuda) ? "" : " (cuda families not in this build)");
  return problems ? 1 : 0;
}

}  // namespace aiscale::ops::testing
