// Benchmarks check before they work: every output path is tried before anything is
// measured, and `bench machine`'s sizes are checked against the memory they need, each
// refusal naming the option and the fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/error_of.h"
#include "../support/run_support.h"
#include "aiscale/bench/machine_memory.h"
#include "aiscale/core/fs.h"

namespace aiscale {
namespace {
using testsupport::error_of;
using testsupport::run_aiscale;
using testsupport::temp_dir;
namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(CheckOutputFile, RefusesWhatCannotBeWrittenAndLeavesNothing) {
  const auto dir = temp_dir("check-output");
  std::string e = error_of([&] { check_output_file(dir.string(), "--output"); });
  EXPECT_TRUE(contains(e, "is a folder")) << e;
  e = error_of([&] { check_output_file((dir / "missing" / "x.jsonl").string(), "--jsonl"); });
  EXPECT_TRUE(contains(e, "--jsonl")) << e;
  EXPECT_TRUE(contains(e, "does not exist")) << e;
  // /proc takes no new file, whoever asks (root included): the creation is tried.
  e = error_of([&] { check_output_file("/proc/aiscale-results.jsonl", "--output"); });
  EXPECT_TRUE(contains(e, "cannot create a file in folder '/proc'")) << e;
  EXPECT_TRUE(contains(e, "--output '/proc/aiscale-results.jsonl'")) << e;
  // Writable: a new file is not created, an existing one is not changed.
  EXPECT_EQ(error_of([&] { check_output_file((dir / "new.jsonl").string(), "--output"); }), "");
  std::ofstream(dir / "old.jsonl") << "{\"kept\": true}\n";
  EXPECT_EQ(error_of([&] { check_output_file((dir / "old.jsonl").string(), "--output"); }), "");
  EXPECT_EQ(read_file((dir / "old.jsonl").string()), "{\"kept\": true}\n");
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // old.jsonl only: neither new.jsonl nor the probe
  fs::remove_all(dir);
}

TEST(BenchMachineMemory, SizesBeyondTheMemoryNameTheOptionAndTheLargestThatFits) {
  bench::MachineSizes s;
  s.model = "gpt2-124m";
  s.batch = 1;
  s.seq = 128;
  s.max_size = 2048;
  s.stream_bytes = 32 << 20;
  bench::MachineMemory host{1 * kGiB, 0};
  EXPECT_EQ(error_of([&] { bench::check_sizes_fit(s, host); }), "");
  // Three fp64 matrices of n^2: n <= sqrt(2^30 / 24) = 6688.
  s.max_size = 65536;
  std::string e = error_of([&] { bench::check_sizes_fit(s, host); });
  EXPECT_TRUE(contains(e, "--max-size 65536:")) << e;
  EXPECT_TRUE(contains(e, "96.0 GiB of host memory")) << e;
  EXPECT_TRUE(contains(e, "the largest --max-size that fits is 6688")) << e;
  s.max_size = 2048;
  // Three arrays: 3 x 512 MiB > 1 GiB; 341 MiB fit.
  s.stream_bytes = int64_t{512} << 20;
  e = error_of([&] { bench::check_sizes_fit(s, host); });
  EXPECT_TRUE(contains(e, "the largest --stream-mib that fits is 341")) << e;
  s.stream_bytes = 32 << 20;
  // The LM head's GEMM grows with the batch; --seq is named when only it was given.
  s.batch = 4096;
  e = error_of([&] { bench::check_sizes_fit(s, host); });
  EXPECT_TRUE(contains(e, "--batch 4096:")) << e;
  EXPECT_TRUE(contains(e, "the largest --batch that fits is")) << e;
  s.batch = 64;
  s.seq = 1024;
  s.seq_named = true;
  e = error_of([&] { bench::check_sizes_fit(s, host); });
  EXPECT_TRUE(contains(e, "--seq 1024:")) << e;
  s.batch = 1;
  s.seq = 128;
  // The all-reduce: 4 ranks on this host, each with the message and a copy.
  s.world = 8;
  s.ranks_per_host = 4;
  s.allreduce_bytes = 256 << 20;
  e = error_of([&] { bench::check_sizes_fit(s, host); });
  EXPECT_TRUE(contains(e, "--allreduce-bytes 268435456:")) << e;
  EXPECT_TRUE(contains(e, "the largest --allreduce-bytes that fits is 134217728")) << e;
  // A GPU run: the sweep's fp32 matrices and cuBLASLt's workspace on the GPU.
  s.world = 1;
  s.gpu = true;
  s.max_size = 16384;
  e = error_of([&] { bench::check_sizes_fit(s, bench::MachineMemory{64 * kGiB, 2 * kGiB}); });
  EXPECT_TRUE(contains(e, "--max-size 16384:")) << e;
  EXPECT_TRUE(contains(e, "of GPU memory")) << e;
  EXPECT_TRUE(contains(e, "the largest --max-size that fits is 13272")) << e;
}

TEST(BenchMachine, OutputsAndSizesAreCheckedBeforeAnythingIsMeasured) {
  auto r = run_aiscale("bench machine --device cpu --quick --output /proc/machine-profile.toml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot create a file in folder '/proc'")) << r.output;
  EXPECT_FALSE(contains(r.output, "GEMM fp")) << r.output;  // nothing measured first
  r = run_aiscale("bench machine --device cpu --quick --jsonl /proc/machine.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--jsonl '/proc/machine.jsonl'")) << r.output;
  EXPECT_FALSE(contains(r.output, "GEMM fp")) << r.output;
  // 2^20 sequences of 1024 tokens: the LM head alone needs hundreds of TiB.
  r = run_aiscale("bench machine --device cpu --quick --batch 1048576 --seq 1024");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--batch 1048576:")) << r.output;
  EXPECT_TRUE(contains(r.output, "the largest --batch that fits is")) << r.output;
  EXPECT_FALSE(contains(r.output, "GEMM fp")) << r.output;
}

TEST(BenchOutputs, EveryBenchmarkChecksItsOutputBeforeMeasuring) {
  const auto dir = temp_dir("bench-outputs");
  for (const std::string& command : std::vector<std::string>{"bench loader --synthetic 8 --size 32 --crop 16 --batch 2 --batches 1 --warmup 0 "
        "--threads 1 --workdir " + dir.string(),
        std::string("bench vision --model resnet-small --image-size 8 --batch-size 2 --steps 1 "
                    "--warmup 0 --threads 1"),
        std::string("bench language --model gpt-tiny --batch 2 --seq 32 --steps 1 --warmup 0 --threads 1"),
        std::string("bench allreduce --backend mpi --min-bytes 4 --max-bytes 4 --iters 1")}) {
    const auto r = run_aiscale(command + " --output /proc/bench.jsonl", "OMP_WAIT_POLICY=passive");
    EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "--output '/proc/bench.jsonl': cannot create a file in folder "
                                   "'/proc'")) << command << "\n" << r.output;
    // Nothing measured: no result line.
    EXPECT_FALSE(r.output.starts_with("{") || contains(r.output, "\n{")) << command << "\n"
                                                                         << r.output;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aiscale
