// CPU ranks started by the real torchrun (PyTorch's torch.distributed.run, Debian's
// python3-torch for /usr/bin/python3) train over the TCP communicator exactly as the same
// config on 2 MPI ranks: with --standalone, with the static rendezvous (torchrun's agent
// serves its own store on --master_port, aiscale's rank 0 takes the next port), and as two
// one-rank "nodes" meeting through a c10d rendezvous; so do ranks started as srun without
// an MPI plugin starts them, meeting through a rendezvous file. The losses are compared bit for bit:
// with 2 ranks every sum has two terms, and a + b = b + a in floating point, so the TCP
// communicator's order of addition cannot differ from MPI's.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

// torchrun as Debian 12 ships it (torch 1.13, Python 3.11) cannot parse its own default
// --redirects/--tee ("0"); "-r 2 -t 2" (stderr to a log file and to the console) works on
// every version. The options are spelt with underscores, which torch 1.x and 2.x both take.
const std::string kTorchrun = "/usr/bin/python3 -m torch.distributed.run -r 2 -t 2";

// A port nobody listens on now, with the next one free too (the static rendezvous uses both).
int free_port_pair() {
  for (int tries = 0; tries < 50; ++tries) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    const int port = ntohs(a.sin_port);
    if (port >= 65535) continue;
    const int next = ::socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons(static_cast<uint16_t>(port + 1));
    const bool free = ::bind(next, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(next);
    if (free) return port;
  }
  return 29500 + static_cast<int>(::getpid() % 1000) * 2;
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  for (const auto& m : read_metrics(run)) out.push_back(m["loss"].get<double>());
  return out;
}

// The reference run on MPI ranks, shared by the tests of ranks started without MPI.
class WithoutMpi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!reference_.empty()) return;  // set up by the other suite of this program
    torch_ = run_command("/usr/bin/python3 -c 'import torch.distributed.run'");
    dir_ = temp_dir("torchrun");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
    // The reference: the same config on 2 MPI ranks.
    auto mpi = run_aiscale("launch -n 2 --threads-per-rank 1 -- " + train("mpi"));
    ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
    reference_ = losses(dir_ / "runs/mpi");
    ASSERT_EQ(reference_.size(), 8u);
  }
  static std::string train(const std::string& name) {
    return "train -q -c " + config_ + " --set train.steps=8 train.eval_batches=1 run.name=" + name;
  }
  static std::string aiscale() { return AISCALE_BINARY; }
  static void expect_like_mpi(const std::string& name, const std::string& output) {
    EXPECT_NE(output.find("2 rank(s) [tcp]"), std::string::npos) << output;
    EXPECT_EQ(losses(dir_ / "runs" / name), reference_) << output;
  }
  static RunOutput torch_;
  static fs::path dir_;
  static std::string config_;
  static std::vector<double> reference_;
};
RunOutput WithoutMpi::torch_;
fs::path WithoutMpi::dir_;
std::string WithoutMpi::config_;
std::vector<double> WithoutMpi::reference_;

class Torchrun : public WithoutMpi {
 protected:
  void SetUp() override {
    ASSERT_EQ(torch_.exit_code, 0)
        << "torchrun needs PyTorch for /usr/bin/python3: install Debian's python3-torch "
           "(scripts/setup.sh does)\n" << torch_.output;
  }
};

}  // namespace

TEST_F(Torchrun, StandaloneTrainsLikeMpi) {
  auto r = run_command(kTorchrun + " --standalone --nproc_per_node=2 --no_python " + aiscale() +
                       " " + train("standalone"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_mpi("standalone", r.output);
}

// torchrun's agent serves its c10d store on --master_port (TORCHELASTIC_USE_AGENT_STORE=True):
// aiscale's store goes to the next port. With that port taken, rank 0 says which port, why
// that one, and what to set.
TEST_F(Torchrun, StaticRendezvousBesideTheAgentsStore) {
  const int port = free_port_pair();
  const std::string launch = kTorchrun + " --rdzv_backend=static --master_addr=127.0.0.1 --master_port=" +
                             std::to_string(port) + " --nnodes=1 --node_rank=0 --nproc_per_node=2 --no_python " +
                             aiscale() + " ";
  auto r = run_command(launch + train("static"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("TCP store 127.0.0.1:" + std::to_string(port + 1)), std::string::npos) << r.output;
  expect_like_mpi("static", r.output);

  // The next port held by another program.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port + 1));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  r = run_command(launch + train("taken") + " parallel.timeout_s=5");
  ::close(fd);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 cannot serve the TCP store on port " + std::to_string(port + 1) +
                          ": Address already in use"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MASTER_PORT+1 (torchrun's agent serves its own store on MASTER_PORT=" +
                          std::to_string(port) + ")"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("set AISCALE_STORE_PORT to a free port"), std::string::npos) << r.output;
}

// Two torchrun agents, one rank each, as on two nodes (--nnodes=2 --node_rank=0/1), meeting
// through a c10d rendezvous at --rdzv_endpoint.
TEST_F(Torchrun, TwoNodesOfOneRankEach) {
  const int port = free_port_pair();
  std::string cmd = "{ ";
  for (int node = 0; node < 2; ++node) {
    const std::string log = (dir_ / ("node" + std::to_string(node))).string();
    cmd += "(" + kTorchrun + " --nnodes=2 --node_rank=" + std::to_string(node) +
           " --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:" + std::to_string(port) +
           " --rdzv_id=aiscale-test-" + std::to_string(::getpid()) + " --no_python " + aiscale() + " " +
           train("nodes") + " > " + log + ".log 2>&1; echo $? > " + log + ".rc) & ";
  }
  cmd += "wait; }";
  run_command(cmd);
  std::string both;
  for (int node = 0; node < 2; ++node) {
    const fs::path log = dir_ / ("node" + std::to_string(node));
    const std::string output = read_bytes(log.string() + ".log");
    EXPECT_EQ(std::atoi(read_bytes(log.string() + ".rc").c_str()), 0) << output;
    both += output;
  }
  expect_like_mpi("nodes", both);
}

// Two ranks started as srun without an MPI plugin starts them (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID and no MPI variables), meeting through a rendezvous file: rank 0 serves the
// store on a free port and writes its address there, and removes the file once all joined.
TEST_F(WithoutMpi, SrunWithoutMpiMeetsThroughAFile) {
  const std::string rdv = (dir_ / "rdv").string();
  std::string cmd = "{ ";
  for (int r = 0; r < 2; ++r) {
    const std::string log = (dir_ / ("srun" + std::to_string(r))).string();
    cmd += "(env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u RANK -u WORLD_SIZE "
           "SLURM_PROCID=" + std::to_string(r) + " SLURM_NTASKS=2 SLURM_LOCALID=" + std::to_string(r) +
           " timeout 120 " + aiscale() + " " + train("srun") + " parallel.rendezvous=file:" + rdv +
           " > " + log + ".log 2>&1; echo $? > " + log + ".rc) & ";
  }
  cmd += "wait; }";
  run_command(cmd);
  std::string both;
  for (int r = 0; r < 2; ++r) {
    const fs::path log = dir_ / ("srun" + std::to_string(r));
    const std::string output = read_bytes(log.string() + ".log");
    EXPECT_EQ(std::atoi(read_bytes(log.string() + ".rc").c_str()), 0) << output;
    both += output;
  }
  expect_like_mpi("srun", both);
  EXPECT_FALSE(fs::exists(rdv));
}
