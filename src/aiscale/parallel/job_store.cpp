#include "aiscale/parallel/job_store.h"

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/parallel/rendezvous.h"
#include "aiscale/parallel/tcp_socket.h"

namespace aiscale::parallel {
namespace {

// A client reaches the others by the address of its interface towards the store's host
// (the network the store is reached over); the rank that serves the store by the name the
// others already use for its host.
std::string client_address(const std::string& store_host, int store_port) {
  std::string a = tcp::local_address_towards(store_host, store_port);
  return a.empty() ? tcp::host_name() : a;
}

}  // namespace

JobStore open_job_store(const Rendezvous& configured, const LaunchEnv& env, double timeout_s) {
  Rendezvous rv = configured;
  if (rv.kind == Rendezvous::Kind::automatic) {
    if (env.mpi_launcher())
      fail("parallel.communicator = \"tcp\" on rank {} of {} started by an MPI launcher ({}): "
           "its ranks meet through a store, so set parallel.rendezvous = \"file:/shared/path\" "
           "or \"tcp://host:port\", or use parallel.communicator = \"mpi\" (or \"auto\")",
           env.rank, env.world, env.source);
    if (env.source != "env")
      fail("this process was started {} as rank {} of {} without an MPI launcher, so the ranks "
           "have no way to meet: set parallel.rendezvous = \"file:/shared/path\" (a folder every "
           "node shares) or \"tcp://host:port\" (rank 0's host and a free port), or set "
           "MASTER_ADDR and MASTER_PORT with RANK and WORLD_SIZE, or launch with mpirun or srun "
           "--mpi=pmix",
           env.source == "slurm" ? "by srun" : "by the launcher", env.rank, env.world);
    rv = tcp_rendezvous_from(env);
  }
  if (rv.kind == Rendezvous::Kind::mpi)
    fail("parallel.rendezvous = \"mpi\" cannot start the TCP communicator (its ranks meet "
         "without MPI): use \"auto\", \"file:/shared/path\" or \"tcp://host:port\", or "
         "parallel.communicator = \"mpi\" under an MPI launcher");
  const auto getenv = [](const char* n) { return std::getenv(n); };
  JobStore js;
  js.prefix = store_key_prefix(env);
  const bool serve = env.rank == 0;
  if (rv.kind == Rendezvous::Kind::tcp) {
    js.store = make_tcp_store(rv.host, rv.port, serve, timeout_s, rv.port_origin);
    js.advertise = serve ? rv.host : client_address(rv.host, rv.port);
    return js;
  }
  // A file: it carries the address of the store rank 0 serves on a free port.
  const std::string path = rendezvous_file_for_job(rv.path, getenv);
  if (serve) {
    js.store = make_tcp_store("localhost", 0, /*serve=*/true, timeout_s);
    js.advertise = tcp::host_name();
    rendezvous_publish(path, fmt::format("{} {}", js.advertise, tcp_store_port(*js.store)), env.world);
    js.rendezvous_file = path;
    return js;
  }
  RendezvousWait wait;
  wait.timeout_s = timeout_s;
  wait.not_before = wall_clock_s();
  const std::string text = rendezvous_wait(path, env.world, env.rank, wait);
  const size_t space = text.rfind(' ');
  const int port = space == std::string::npos ? 0 : std::atoi(text.c_str() + space + 1);
  if (space == std::string::npos || space == 0 || port <= 0)
    fail("rendezvous file '{}' holds '{}', not a store address: was it written by another "
         "aiscale version? Give this job a path of its own", path, text);
  const std::string host = text.substr(0, space);
  js.store = make_tcp_store(host, port, /*serve=*/false, timeout_s);
  js.advertise = client_address(host, port);
  return js;
}

}  // namespace aiscale::parallel
