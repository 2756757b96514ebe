// The systems catalogue: every reference system present, figures as in
// the sites' published figures, user files adding and overriding, clear errors.
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/catalog.h"

namespace aiscale::plan {
namespace {
namespace fs = std::filesystem;

std::string builtin() { return std::string(AISCALE_SOURCE_DIR) + "/data/systems"; }

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("aiscale_plan_" + std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

TEST(PlanCatalog, EveryReferenceSystemIsListed) {
  const Catalog cat = load_catalog(builtin());
  for (const char* id : {"lumi", "leonardo", "marenostrum5", "meluxina", "karolina", "discoverer",
                         "vega", "deucalion", "jupiter", "aris", "daedalus", "jade2", "baskerville",
                         "stanage", "cosma8", "graphcore", "dawn"})
    EXPECT_NE(cat.find_system(id), nullptr) << id;
  for (const char* id : {"V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-64GB", "A100-SXM4-80GB",
                         "H100-SXM5-64GB", "H100-SXM5-80GB", "H100-96GB", "H100-PCIe-80GB",
                         "H200-SXM-141GB", "GH200-144GB", "MI100-32GB", "MI210-64GB", "MI250X-GCD",
                         "MI300X-192GB", "Max1550-128GB"})
    EXPECT_NE(cat.find_accelerator(id), nullptr) << id;
}

TEST(PlanCatalog, FiguresMatchTheReference) {
  const Catalog cat = load_catalog(builtin());
  const auto leo = cat.resolve("leonardo");
  ASSERT_EQ(leo.size(), 1u);
  const Partition& b = *leo[0].partition;
  EXPECT_EQ(b.nodes, 3456);
  EXPECT_EQ(b.gpus_per_node, 4);
  EXPECT_EQ(b.accelerator.memory_gib, 64);
  EXPECT_DOUBLE_EQ(b.ram_gib, 512);
  EXPECT_EQ(b.network.links, 2);
  EXPECT_DOUBLE_EQ(b.network.gbps_per_link, 200);
  EXPECT_EQ(b.network.topology, Topology::dragonfly_plus);
  EXPECT_DOUBLE_EQ(b.network.node_bytes_per_s(), 50e9);  // 2 × 200 Gb/s

  const Partition& lumi = *cat.resolve("lumi")[0].partition;
  EXPECT_EQ(lumi.gpus_per_node, 8);  // 4 MI250X = 8 GCDs
  EXPECT_DOUBLE_EQ(lumi.accelerator.peak_bf16 * 2, 383.0);  // a package is two GCDs
  EXPECT_EQ(lumi.network.topology, Topology::dragonfly);
  EXPECT_EQ(cat.resolve("mn5")[0].partition->network.topology, Topology::fat_tree);

  EXPECT_DOUBLE_EQ(cat.find_accelerator("A100-SXM4-40GB")->peak_bf16, 312);
  EXPECT_DOUBLE_EQ(cat.find_accelerator("H100-SXM5-80GB")->peak_bf16, 989.5);
  EXPECT_DOUBLE_EQ(cat.find_accelerator("H100-PCIe-80GB")->peak_bf16 * 2, 1513);  // dense = half
  EXPECT_DOUBLE_EQ(cat.find_accelerator("H200-SXM-141GB")->memory_bandwidth_tbs, 4.8);
  EXPECT_EQ(cat.find_accelerator("V100-SXM2-32GB")->peak_bf16, 0);  // no BF16 on Volta
}

TEST(PlanCatalog, DeucalionsTwoMemorySizesAreTwoPartitions) {
  const Catalog cat = load_catalog(builtin());
  const auto d = cat.resolve("deucalion");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].partition->nodes + d[1].partition->nodes, 33);
}

TEST(PlanCatalog, UnknownSystemsListTheKnownOnes) {
  const Catalog cat = load_catalog(builtin());
  try {
    cat.resolve("summit");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown system 'summit'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("leonardo"), std::string::npos) << msg;
  }
  EXPECT_THROW(cat.resolve("leonardo/nope"), Error);
  EXPECT_THROW(cat.resolve("daedalus"), Error);   // planned, no partitions
  EXPECT_THROW(cat.resolve("booster"), Error);    // ambiguous: Leonardo and JUPITER
  EXPECT_EQ(cat.resolve("leonardo/booster").size(), 1u);
}

TEST(PlanCatalog, UserFilesAddAndOverride) {
  TempDir dir;
  const std::string file = dir.write("mine.toml", R"(
[[system]]
id = "leonardo"
  [[system.partition]]
  id = "booster"
  nodes = 100
  network = { links = 4 }

[[system]]
id = "labcluster"
name = "Lab cluster"
  [[system.partition]]
  id = "gpu"
  kind = "gpu"
  nodes = 2
  gpus_per_node = 8
  accelerator = "H100-SXM5-80GB"
  intra_node = { link = "NVLink 4", gbytes_per_s = 450.0 }
  network = { kind = "RoCE", links = 1, gbps_per_link = 100.0, topology = "fat-tree" }
)");
  const Catalog cat = load_catalog(builtin(), {file});
  const Partition& b = *cat.resolve("leonardo")[0].partition;
  EXPECT_EQ(b.nodes, 100);                   // overridden
  EXPECT_EQ(b.network.links, 4);             // overridden inside the inline table
  EXPECT_DOUBLE_EQ(b.network.gbps_per_link, 200);  // kept
  EXPECT_EQ(b.gpus_per_node, 4);             // kept
  const auto lab = cat.resolve("labcluster");
  ASSERT_EQ(lab.size(), 1u);
  EXPECT_EQ(lab[0].partition->max_gpus(), 16);
}

TEST(PlanCatalog, MistakesInFilesNameTheFileAndKey) {
  TempDir dir;
  dir.write("a.toml", "[[system]]\nid = \"x\"\n  [[system.partition]]\n  id = \"gpu\"\n  gpus_per_nod = 4\n");
  try {
    load_catalog(builtin(), {dir.str()});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("a.toml"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown key 'gpus_per_nod'"), std::string::npos) << msg;
  }
  TempDir d2;
  d2.write("b.toml", "[[system]]\nid = \"y\"\n  [[system.partition]]\n  id = \"gpu\"\n  accelerator = \"B200\"\n");
  EXPECT_THROW(load_catalog(builtin(), {d2.str()}), Error);
  TempDir d3;
  d3.write("c.toml", "[[system]]\nid = \"z\"\n  [[system.partition]]\n  id = \"gpu\"\n  nodes = \"many\"\n");
  EXPECT_THROW(load_catalog(builtin(), {d3.str()}), Error);
  TempDir d4;
  d4.write("d.toml", "[[system]\nid = \"broken\"\n");
  EXPECT_THROW(load_catalog(builtin(), {d4.str()}), Error);
  EXPECT_THROW(load_catalog("/nonexistent/aiscale/catalogue"), Error);
}

}  // namespace
}  // namespace aiscale::plan
