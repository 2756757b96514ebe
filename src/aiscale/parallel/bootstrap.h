// The building blocks that make_communicator (comm_factory.cpp) puts together: the MPI
// communicator, the NCCL communicator and its bootstrap, GPU selection by node-local
// rank, and host staging of device buffers for MPI and TCP. Each is present in every build and
// fails with a message naming the missing piece where aiscale was built without it.
#pragma once
#include <memory>
#include <string>

#include "aiscale/parallel/algorithms/allreduce_choice.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {

// Which threads call MPI: only the one that initialised it (CPU ranks), or any thread
// (GPU ranks over MPI: the gradient reducer's own thread, data_parallel/comm_queue.h, calls
// the communicator too). For any_thread MPI is initialised with MPI_THREAD_MULTIPLE asked
// for, and a library that grants less than MPI_THREAD_SERIALIZED is refused.
enum class MpiThreads { main_only, any_thread };
// MPI_COMM_WORLD (initialises MPI; finalises it when destroyed), summing floats with
// `setting`'s algorithm (parallel.allreduce; its splits too). comm_mpi.cpp.
std::unique_ptr<Communicator> make_mpi_communicator(const algorithms::AllreduceSetting& setting = {},
                                                    MpiThreads threads = MpiThreads::main_only);
// Whether MPI, initialised, lets several threads call it at the same time
// (MPI_THREAD_MULTIPLE); false before MPI_Init and without MPI. comm_mpi.cpp.
bool mpi_threads_concurrent();
// This rank's index among the ranks of its node (MPI shared-memory split); MPI must be
// initialised (by make_mpi_communicator). comm_mpi.cpp.
int mpi_node_local_rank();
bool mpi_compiled();

// CPU ranks over TCP (comm_tcp.cpp): rank and world from the launcher's environment, met
// through the job's store (job_store.h: MASTER_ADDR and aiscale_store_port under torchrun,
// or parallel.rendezvous = "file:..." / "tcp://..."), floats summed with
// parallel.allreduce's algorithm.
std::unique_ptr<Communicator> make_tcp_communicator(const CommOptions& options);

// GPUs this process can see; 0 without CUDA or without a GPU. cuda_device.cpp.
int cuda_visible_gpus();
// Makes `device` current for this thread (the model and NCCL use the current device).
void cuda_use_gpu(int device);
// Whether p is device (or managed) memory rather than host memory; false without CUDA.
bool cuda_is_device_pointer(const void* p);
// "NVIDIA H100 80GB HBM3" for the current device; "" without CUDA.
std::string cuda_current_gpu_name();
// "0000:19:00.0", the current device's PCI bus id (for NVML); "" without CUDA.
std::string cuda_current_gpu_pci_bus_id();
// Marks the start (true) or the end (false) of the work a CUDA profiler should record
// (cudaProfilerStart/Stop: `nsys profile --capture-range=cudaProfilerApi`, `ncu
// --profile-from-start off`); without a profiler attached, and without CUDA, nothing.
void cuda_profiler_range(bool start);
// Picks this rank's GPU from its node-local rank (-1: unknown, then device 0) modulo the
// visible GPUs and makes it current; returns the device index. Fails without a GPU.
int cuda_select_local_gpu(int local_rank);
// Wraps a host communicator (MPI, TCP) for a GPU rank (host_staged.cpp): device buffers
// of the host collectives are staged through host memory, and the device collectives of
// comm.h (all-reduce, reduce-scatter, all-gather, point-to-point, ordered by CUDA events)
// run on a stream of its own through host memory, so that every GPU layout runs over it
// (slower than NCCL; several ranks may share a GPU). `one_lock`: every such communicator
// of the process takes turns (MPI that allows one calling thread at a time); else each
// takes turns with itself only. Without CUDA returns `inner` unchanged.
std::unique_ptr<Communicator> with_host_staging(std::unique_ptr<Communicator> inner, bool one_lock);

// NCCL, one process per GPU (nccl/comm_nccl.cpp): bootstraps the NCCL unique id through
// MPI or a rendezvous file (see CommOptions::rendezvous), selects the node-local GPU,
// and creates an NCCL communicator whose every wait is bounded by options.timeout_s (then
// the communicator is aborted and the rank fails), its calls too (nccl/call_monitor.h).
std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options);

}  // namespace aiscale::parallel
