// Rendezvous of a job's ranks through a Store: rank 0 publishes a small blob (the NCCL
// unique id), the other ranks wait for it. Used when the ranks are started without MPI
// (srun without an MPI plugin, torchrun-style launchers, a hand-written launcher).
//
// The published value carries the world size and rank 0's clock, so that a reader
// refuses a value of another job (another size) or one left by an earlier run in a file
// store (older than this reader's start minus `max_clock_skew_s`). The path forms are a
// file store in the path's folder with the file name as key: the file is written
// atomically (temporary file, fsync, rename), so a reader sees the whole blob or nothing.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace aiscale::parallel {

class Store;

// Rank 0: sets `key` to `blob` for a job of `world` ranks (replacing any older value).
void rendezvous_publish(Store& store, const std::string& key, std::string_view blob, int world);
// The same through the file at `path` (its folder must exist).
void rendezvous_publish(const std::string& path, std::string_view blob, int world);

struct RendezvousWait {
  double timeout_s = 300;        // give up after this long, with an error naming the file
  double poll_s = 0.05;          // first poll interval (doubles up to 1 s)
  double not_before = 0;         // wall-clock seconds (since the epoch): ignore older values
  double max_clock_skew_s = 120; // tolerance on not_before (clocks of nodes, launch spread)
};

// Other ranks: waits for the blob of a `world`-rank job. Throws Error after the
// timeout (rank 0 not started, or the path not shared) or for a value of another size.
std::string rendezvous_wait(Store& store, const std::string& key, int world, int rank,
                            const RendezvousWait& w);
std::string rendezvous_wait(const std::string& path, int world, int rank, const RendezvousWait& w);

// Seconds since the epoch (the clock written into the value).
double wall_clock_s();

}  // namespace aiscale::parallel
