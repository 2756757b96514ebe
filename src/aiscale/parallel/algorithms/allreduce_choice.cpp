#include "aiscale/parallel/algorithms/allreduce_choice.h"

#include <algorithm>
#include <map>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::parallel::algorithms {

namespace {

constexpr EnumName<AllreduceAlgorithm> allreduce_algorithms[] = {
    {AllreduceAlgorithm::library, "library"},
    {AllreduceAlgorithm::ring, "ring"},
    {AllreduceAlgorithm::hierarchical, "hierarchical"}};

}  // namespace

AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name) {
  return parse_enum(allreduce_algorithms, name, "all-reduce algorithm");
}

const char* allreduce_algorithm_name(AllreduceAlgorithm a) { return enum_name(allreduce_algorithms, a); }

std::vector<int> NodeTopology::leaders() const {
  std::vector<int> out;
  for (const auto& n : nodes) out.push_back(n.front());
  return out;
}

NodeTopology topology_from_node_keys(const std::vector<int64_t>& key_of_rank) {
  if (key_of_rank.empty()) fail("internal: a node topology needs at least one rank");
  NodeTopology t;
  t.node_of.resize(key_of_rank.size());
  std::map<int64_t, int> index;  // key -> node index, assigned in the order of lowest rank
  for (int r = 0; r < static_cast<int>(key_of_rank.size()); ++r) {
    auto [it, added] = index.emplace(key_of_rank[static_cast<size_t>(r)], static_cast<int>(t.nodes.size()));
    if (added) t.nodes.emplace_back();
    t.nodes[static_cast<size_t>(it->second)].push_back(r);
    t.node_of[static_cast<size_t>(r)] = it->second;
  }
  return t;
}

}  // namespace aiscale::parallel::algorithms
