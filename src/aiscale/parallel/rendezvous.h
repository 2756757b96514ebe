// Rendezvous through a file on a filesystem every rank can read: rank 0 publishes a
// small blob (the NCCL unique id), the other ranks poll for it. Used when the ranks are
// started without MPI (srun without an MPI plugin, a hand-written launcher).
//
// The file is written atomically (temporary file, fsync, rename), so a reader sees the
// whole blob or nothing. It carries the world size and rank 0's clock, so that a reader
// refuses a file of another job (another size) or one left by an earlier run (older
// than this reader's start minus `max_clock_skew_s`).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace aiscale::parallel {

// Rank 0: writes `blob` for a job of `world` ranks (replacing any older file).
void rendezvous_publish(const std::string& path, std::string_view blob, int world);

struct RendezvousWait {
  double timeout_s = 300;        // give up after this long, with an error naming the file
  double poll_s = 0.05;          // first poll interval (doubles up to 1 s)
  double not_before = 0;         // wall-clock seconds (since the epoch): ignore older files
  double max_clock_skew_s = 120; // tolerance on not_before (clocks of nodes, launch spread)
};

// Other ranks: waits for the blob of a `world`-rank job. Throws Error after the
// timeout (rank 0 not started, or the path not shared) or for a file of another size.
std::string rendezvous_wait(const std::string& path, int world, int rank, const RendezvousWait& w);

// Seconds since the epoch (the clock written into the file).
double wall_clock_s();

}  // namespace aiscale::parallel
