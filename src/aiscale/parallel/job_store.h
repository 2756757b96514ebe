// The store through which the ranks of a job started without MPI meet (the TCP
// communicator's set-up): chosen from parallel.rendezvous and the launcher's environment.
//   tcp://host:port, or "auto" under a torchrun-style launch (MASTER_ADDR with the port of
//     aiscale_store_port: MASTER_PORT, or MASTER_PORT+1 beside torchrun's own store): rank 0
//     serves the store there, every rank is a client;
//   file:/shared/path: rank 0 serves the store on a free port and writes its address to the
//     file (atomically, with the job step's suffix: rendezvous_file_for_job); the others
//     wait for the file, refuse one of another world size or one older than their start,
//     and connect. Rank 0 removes the file once every rank has joined.
#pragma once
#include <memory>
#include <string>

#include "aiscale/parallel/launch_env.h"
#include "aiscale/parallel/store.h"

namespace aiscale::parallel {

struct JobStore {
  std::shared_ptr<Store> store;
  std::string prefix;           // of this job's keys (store_key_prefix)
  std::string advertise;        // the host name or address the other ranks reach this rank by
  std::string rendezvous_file;  // rank 0 with a file rendezvous: remove it once all joined
};

// Rank env.rank of env.world meets the others. Throws Error naming the fix when the
// launcher gives no way to meet (srun without an MPI plugin and no parallel.rendezvous)
// or parallel.rendezvous = "mpi".
JobStore open_job_store(const Rendezvous& rv, const LaunchEnv& env, double timeout_s);

}  // namespace aiscale::parallel
