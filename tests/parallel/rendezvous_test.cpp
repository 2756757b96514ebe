// The rendezvous file that carries the NCCL id when ranks start without MPI.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/rendezvous.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::parallel;
using namespace aiscale::testsupport;

namespace {

// Every byte value, as an NCCL id has.
std::string binary_blob() {
  std::string b;
  for (int i = 0; i < 128; ++i) b += static_cast<char>((i * 37 + 11) & 255);
  return b;
}

RendezvousWait quick(double timeout_s) {
  RendezvousWait w;
  w.timeout_s = timeout_s;
  w.poll_s = 0.01;
  return w;
}

}  // namespace

TEST(RendezvousFile, ReaderGetsTheBlobPublishedLater) {
  auto dir = temp_dir("rdv-later");
  const std::string path = (dir / "id").string();
  const std::string blob = binary_blob();
  auto reader = std::async(std::launch::async, [&] { return rendezvous_wait(path, 4, 2, quick(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  rendezvous_publish(path, blob, 4);
  EXPECT_EQ(reader.get(), blob);
  // Nothing but the file itself is left (the temporary file was renamed).
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(RendezvousFile, TimeoutNamesTheFileAndTheFix) {
  auto dir = temp_dir("rdv-timeout");
  const std::string path = (dir / "never").string();
  auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { rendezvous_wait(path, 2, 1, quick(0.3)); });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(e.find("rank 1: waited"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("shares"), std::string::npos) << e;
  EXPECT_GE(s, 0.3);
  EXPECT_LT(s, 3.0);
}

TEST(RendezvousFile, AFileOfAnotherWorldSizeIsRefused) {
  auto dir = temp_dir("rdv-world");
  const std::string path = (dir / "id").string();
  rendezvous_publish(path, "abc", 8);
  std::string e = error_of([&] { rendezvous_wait(path, 4, 1, quick(1)); });
  EXPECT_NE(e.find("8 ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("its own"), std::string::npos) << e;
}

TEST(RendezvousFile, AStaleFileIsIgnoredUntilReplaced) {
  auto dir = temp_dir("rdv-stale");
  const std::string path = (dir / "id").string();
  rendezvous_publish(path, "old", 2);  // left by an earlier run...
  RendezvousWait w = quick(10);
  w.not_before = wall_clock_s() + 1000;  // ...that started long before this reader
  w.max_clock_skew_s = 10;
  auto reader = std::async(std::launch::async, [&] { return rendezvous_wait(path, 2, 1, w); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(reader.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  // The new rank 0's file is newer than not_before - skew once its clock says so: rewrite
  // it by hand with such a time.
  atomic_write_file(path, "aiscale-rendezvous 1\nworld 2\ntime " +
                              std::to_string(wall_clock_s() + 1000) + "\nblob 6e6577\n");
  EXPECT_EQ(reader.get(), "new");
  // A stale file that is never replaced: the timeout says so.
  rendezvous_publish(path, "old", 2);
  w.timeout_s = 0.3;
  std::string e = error_of([&] { rendezvous_wait(path, 2, 1, w); });
  EXPECT_NE(e.find("earlier run"), std::string::npos) << e;
}

TEST(RendezvousFile, ForeignFileAndMissingFolder) {
  auto dir = temp_dir("rdv-foreign");
  const std::string path = (dir / "id").string();
  std::ofstream(path) << "hello\n";
  std::string e = error_of([&] { rendezvous_wait(path, 2, 1, quick(1)); });
  EXPECT_NE(e.find("not an aiscale rendezvous file"), std::string::npos) << e;
  e = error_of([&] { rendezvous_publish((dir / "no/such/folder/id").string(), "x", 2); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}
