// Chooses and builds the communicator of a run from parallel.communicator, the device
// and the launcher's environment: one process; NCCL for GPU ranks; for CPU ranks MPI under
// an MPI launcher (mpirun, srun --mpi=..., aiscale launch) and TCP without one (torchrun,
// srun without an MPI plugin given parallel.rendezvous).
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/launch_env.h"
#include "aiscale/parallel/nccl/device_algorithms.h"

namespace aiscale::parallel {
namespace {

const char* process_env(const char* name) { return std::getenv(name); }

// A CUDA rank of a host communicator (MPI, TCP) takes its node's GPU and stages device
// buffers through host memory (host_staged.cpp), every GPU layout included; the
// hand-written GPU algorithms (nccl/device_algorithms.h) run on NCCL only.
void refuse_host_algorithms_on_gpus(const CommOptions& o, const char* backend) {
  if (o.device == "cuda" && algorithms::parse_allreduce_algorithm(o.allreduce) !=
                                algorithms::AllreduceAlgorithm::library)
    fail("parallel.allreduce = \"{}\" on GPU ranks runs over NCCL (device point-to-point), "
         "not {} with host staging: use parallel.communicator = \"nccl\" (an aiscale built "
         "with NCCL), or parallel.allreduce = \"library\"", o.allreduce, backend);
}

// MPI ranks; a CUDA rank also takes its node's GPU (ranks may share one) and stages
// device buffers through host memory, calling MPI from the gradient reducer's thread too.
std::unique_ptr<Communicator> mpi_ranks(const CommOptions& o) {
  algorithms::AllreduceSetting setting;
  setting.algorithm = algorithms::parse_allreduce_algorithm(o.allreduce);
  setting.ranks_per_node = o.ranks_per_node;
  refuse_host_algorithms_on_gpus(o, "MPI");
  const LaunchEnv env = launch_env();
  require_mpi_launcher(env, process_env);
  const bool gpu = o.device == "cuda";
  auto comm = make_mpi_communicator(setting, gpu ? MpiThreads::any_thread : MpiThreads::main_only);
  if (!gpu) return comm;
  int local = env.local_rank >= 0 && env.world == comm->world() ? env.local_rank : mpi_node_local_rank();
  cuda_select_local_gpu(local);
  // MPI_THREAD_MULTIPLE: each group takes turns with itself only; SERIALIZED: all at once.
  return with_host_staging(std::move(comm), /*one_lock=*/!mpi_threads_concurrent());
}

// TCP ranks (comm_tcp.h), the same way.
std::unique_ptr<Communicator> tcp_ranks(const CommOptions& o) {
  refuse_host_algorithms_on_gpus(o, "TCP");
  auto comm = make_tcp_communicator(o);
  if (o.device != "cuda") return comm;
  const LaunchEnv env = launch_env();
  cuda_select_local_gpu(env.local_rank >= 0 ? env.local_rank : env.rank);
  // Each group has connections of its own (tcp_mesh.h): it takes turns with itself only.
  return with_host_staging(std::move(comm), /*one_lock=*/false);
}

// Whether host ranks of "auto" talk TCP: started without an MPI launcher, torchrun-style
// (RANK/WORLD_SIZE) or with a rendezvous to meet through (srun without an MPI plugin).
bool host_ranks_over_tcp(const CommOptions& o) {
  if (mpi_launched(process_env)) return false;
  if (launch_env().source == "env") return true;
  const Rendezvous::Kind k = parse_rendezvous(o.rendezvous).kind;
  return k == Rendezvous::Kind::file || k == Rendezvous::Kind::tcp;
}

// NCCL ranks, summing fp32 device buffers with parallel.allreduce's algorithm.
std::unique_ptr<Communicator> nccl_ranks(const CommOptions& o) {
  algorithms::AllreduceSetting setting;
  setting.algorithm = algorithms::parse_allreduce_algorithm(o.allreduce);
  setting.ranks_per_node = o.ranks_per_node;
  return with_device_allreduce(make_nccl_communicator(o), setting);
}

[[noreturn]] void no_device_collectives(const Communicator& c, const char* what) {
  fail("the {} communicator has no device stream, so it cannot run the {} of a GPU model "
       "(GPU ranks over NCCL, or over MPI or TCP with train.device = \"cuda\", can)",
       c.backend(), what);
}

}  // namespace

void Communicator::allreduce_sum_after(void*, int64_t, DType, void*) {
  no_device_collectives(*this, "all-reduce");
}
void Communicator::allreduce_sum_squares_after(void*, int64_t, DType, void*, double*) {
  fail("the {} communicator cannot add sums of squares to its all-reduce (fuses_sum_squares() "
       "is false): use allreduce_sum_after and a pass of its own", backend());
}
void Communicator::reduce_scatter_sum_after(void*, int64_t, DType, void*) {
  no_device_collectives(*this, "reduce-scatter");
}
void Communicator::allgather_after(void*, int64_t, void*) {
  no_device_collectives(*this, "all-gather");
}
// The defaults build the host collectives from an all-reduce (correct on any
// communicator, one transfer of the whole buffer); MPI has its own.
void Communicator::allgather(const float* in, float* out, int64_t count) {
  std::fill(out, out + world() * count, 0.0f);
  std::copy(in, in + count, out + rank() * count);
  allreduce_sum(out, world() * count);
}
void Communicator::reduce_scatter_sum(const float* in, float* out, int64_t count) {
  std::vector<float> all(in, in + world() * count);
  allreduce_sum(all.data(), world() * count);
  std::copy(all.begin() + rank() * count, all.begin() + (rank() + 1) * count, out);
}
void Communicator::send(const float*, int64_t, int peer) {
  fail("the {} communicator has no point-to-point send (to rank {}): pipeline stages need "
       "MPI or TCP ranks", backend(), peer);
}
void Communicator::recv(float*, int64_t, int peer) {
  fail("the {} communicator has no point-to-point receive (from rank {}): pipeline stages "
       "need MPI or TCP ranks", backend(), peer);
}
void Communicator::send_after(const void*, int64_t, int peer) {
  fail("the {} communicator has no device point-to-point send (to rank {}): GPU pipeline stages "
       "need GPU ranks (train.device = \"cuda\" over NCCL, MPI or TCP)", backend(), peer);
}
void Communicator::recv_after(void*, int64_t, int peer) {
  fail("the {} communicator has no device point-to-point receive (from rank {}): GPU pipeline "
       "stages need GPU ranks (train.device = \"cuda\" over NCCL, MPI or TCP)", backend(), peer);
}
void Communicator::record(void*) { no_device_collectives(*this, "event"); }
std::unique_ptr<Communicator> Communicator::split(int, int) {
  fail("the {} communicator cannot split into sub-groups (tensor, pipeline or data-parallel "
       "groups): build the groups from its base communicator (MPI or NCCL) instead", backend());
}

std::unique_ptr<Communicator> make_communicator(const CommOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    fail("unknown device '{}' for the communicator: use cpu or cuda", o.device);
  algorithms::parse_allreduce_algorithm(o.allreduce);  // a bad name fails first
  if (o.ranks_per_node < 0)
    fail("parallel.ranks_per_node = {} must be 0 (the nodes the ranks run on) or a positive "
         "count", o.ranks_per_node);
  if (o.kind == "none") return make_single_process();
  const int launched = launched_world_size();
  if (o.kind == "auto") {
    if (launched <= 1) return make_single_process();
    if (o.device == "cuda") {
      if (nccl_compiled()) return nccl_ranks(o);
      log::warn("aiscale was built without NCCL: the {} GPU ranks all-reduce through {} and "
                "host memory (slow); install NCCL (nccl.h, libnccl) and rebuild", launched,
                host_ranks_over_tcp(o) ? "TCP" : "MPI");
    }
    return host_ranks_over_tcp(o) ? tcp_ranks(o) : mpi_ranks(o);
  }
  if (o.kind == "mpi") return mpi_ranks(o);
  if (o.kind == "tcp") return tcp_ranks(o);
  if (o.kind == "nccl") {
    if (o.device != "cuda")
      fail("parallel.communicator = \"nccl\" needs train.device = \"cuda\" (NCCL connects GPUs); "
           "use \"auto\", \"mpi\" or \"tcp\" on CPUs");
    if (!nccl_compiled())
      fail("parallel.communicator = \"nccl\": this aiscale was built without NCCL{}: install NCCL "
           "(nccl.h and libnccl, e.g. Debian's libnccl-dev or NVIDIA's packages) and rebuild with "
           "the cuda preset, or use parallel.communicator = \"mpi\"",
#ifdef AISCALE_HAVE_CUDA
           ""
#else
           " (nor CUDA)"
#endif
      );
    return nccl_ranks(o);
  }
  fail("unknown communicator '{}': use auto, mpi, tcp, nccl or none", o.kind);
}

std::unique_ptr<Communicator> make_communicator(const std::string& kind) {
  CommOptions o;
  o.kind = kind;
  return make_communicator(o);
}

}  // namespace aiscale::parallel
