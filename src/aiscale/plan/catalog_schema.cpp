// The schema of the systems catalogue's TOML files: which keys each table ([[system]],
// [[system.partition]] and its sub-tables, [[accelerator]], [[cpu]], [[access]]) may hold
// and of what type, checked file by file before the files are merged, so that a typo or a
// wrong type is reported against the file and line that hold it. Kept apart from
// catalog.cpp, which merges the checked files and turns them into the planner's structs.
#include "aiscale/plan/catalog_schema.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::plan {
namespace {

// ---- schema: which keys each table may hold, and of what type ---------------------

enum class Kind { string, number, integer, boolean, table, strings, tables };

struct Field {
  const char* key;
  Kind kind;
};

const std::vector<Field> kTopFields = {
    {"system", Kind::tables}, {"accelerator", Kind::tables}, {"cpu", Kind::tables},
    {"access", Kind::tables}};
const std::vector<Field> kAccessFields = {
    {"id", Kind::string},          {"name", Kind::string},        {"programme", Kind::string},
    {"audience", Kind::string},    {"purpose", Kind::string},     {"new_users", Kind::boolean},
    {"experienced", Kind::boolean}, {"max_gpu_hours", Kind::number}, {"min_gpu_hours", Kind::number},
    {"max_months", Kind::number},  {"period", Kind::string},      {"turnaround", Kind::string},
    {"url", Kind::string},         {"seen", Kind::string},        {"notes", Kind::string}};
const std::vector<Field> kSystemFields = {
    {"id", Kind::string},         {"name", Kind::string},    {"aliases", Kind::strings},
    {"site", Kind::string},       {"eurohpc", Kind::boolean}, {"status", Kind::string},
    {"sustained_pflops", Kind::number}, {"notes", Kind::string}, {"partition", Kind::tables}};
const std::vector<Field> kPartitionFields = {
    {"id", Kind::string},          {"name", Kind::string},      {"kind", Kind::string},
    {"nodes", Kind::integer},      {"gpus_per_node", Kind::integer},
    {"accelerator", Kind::string}, {"cpu", Kind::string},       {"ram_gib", Kind::number},
    {"local_ssd", Kind::string},   {"interface", Kind::string}, {"launched", Kind::string},
    {"notes", Kind::string},       {"intra_node", Kind::table}, {"network", Kind::table},
    {"cpu_model", Kind::string},   {"sockets", Kind::integer},  {"cpu_ghz", Kind::number},
    {"slurm", Kind::table},        {"storage", Kind::table}};
const std::vector<Field> kSlurmFields = {
    {"partition", Kind::string},     {"qos", Kind::string},        {"gpu_request", Kind::string},
    {"gres_name", Kind::string},     {"cores_per_gpu", Kind::integer}, {"cpu_bind", Kind::string},
    {"gpu_bind", Kind::string},      {"exclusive", Kind::boolean}, {"max_time", Kind::string},
    {"srun_mpi", Kind::string},      {"account_required", Kind::boolean},
    {"prelude", Kind::strings},      {"env", Kind::strings},       {"container_exec", Kind::string},
    {"launcher", Kind::string},      {"source", Kind::string}};
const std::vector<Field> kIntraFields = {{"link", Kind::string},
                                         {"gbytes_per_s", Kind::number},
                                         {"assumed", Kind::boolean},
                                         {"note", Kind::string}};
const std::vector<Field> kNetworkFields = {
    {"kind", Kind::string},        {"links", Kind::integer},      {"gbps_per_link", Kind::number},
    {"topology", Kind::string},    {"group_nodes", Kind::integer}, {"shared_by_nodes", Kind::integer},
    {"global_taper", Kind::number}, {"global_source", Kind::string}};
const std::vector<Field> kStorageFields = {{"kind", Kind::string},
                                           {"gbytes_per_s", Kind::number},
                                           {"source", Kind::string}};
const std::vector<Field> kAcceleratorFields = {
    {"id", Kind::string},           {"vendor", Kind::string},
    {"name", Kind::string},         {"memory_gib", Kind::number},
    {"memory_bandwidth_tbs", Kind::number}, {"bandwidth_as", Kind::string},
    {"peak_tflops", Kind::table},   {"device_names", Kind::strings},
    {"board_power_w", Kind::number}, {"source", Kind::string}};
const std::vector<Field> kCpuFields = {
    {"id", Kind::string},    {"vendor", Kind::string}, {"name", Kind::string},
    {"cores", Kind::integer}, {"ghz", Kind::number},   {"flops_per_cycle", Kind::table},
    {"memory_bandwidth_gbs", Kind::number},            {"source", Kind::string},
    {"device_names", Kind::strings}};
const std::vector<Field> kCpuFlopFields = {{"fp32", Kind::number}, {"fp64", Kind::number}};
const std::vector<Field> kPeakFields = {{"fp64", Kind::number}, {"fp32", Kind::number},
                                        {"tf32", Kind::number}, {"fp16", Kind::number},
                                        {"bf16", Kind::number}, {"fp8", Kind::number}};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::string: return "a string";
    case Kind::number: return "a number";
    case Kind::integer: return "an integer";
    case Kind::boolean: return "true or false";
    case Kind::table: return "a table";
    case Kind::strings: return "an array of strings";
    case Kind::tables: return "an array of tables";
  }
  return "?";
}

bool has_kind(const toml::node& n, Kind k) {
  switch (k) {
    case Kind::string: return n.is_string();
    case Kind::number: return n.is_number();
    case Kind::integer: return n.is_integer();
    case Kind::boolean: return n.is_boolean();
    case Kind::table: return n.is_table();
    case Kind::strings: return n.is_array() && n.as_array()->is_homogeneous(toml::node_type::string);
    case Kind::tables: return n.is_array_of_tables();
  }
  return false;
}

std::string line_of(const toml::node& n) {
  return n.source().begin ? fmt::format(" (line {})", n.source().begin.line) : "";
}

// Throws for an unknown key or a value of the wrong type, naming file, place and line.
void check_fields(const toml::table& t, const std::vector<Field>& fields,
                  const std::string& where) {
  for (auto&& [key, node] : t) {
    const std::string_view name = key.str();  // clang 14 cannot capture a structured binding
    auto it = std::find_if(fields.begin(), fields.end(),
                           [&](const Field& f) { return name == f.key; });
    if (it == fields.end()) {
      std::string known;
      for (const auto& f : fields) known += std::string(known.empty() ? "" : ", ") + f.key;
      fail("{}: unknown key '{}'{}: known keys are {}", where, key.str(), line_of(node), known);
    }
    if (!has_kind(node, it->kind))
      fail("{}: key '{}'{} must be {}", where, key.str(), line_of(node), kind_name(it->kind));
  }
}

std::string id_of(const toml::table& t, const std::string& where, const char* what) {
  auto id = t["id"].value<std::string>();
  if (!id || id->empty()) fail("{}: a [[{}]] entry{} has no id: add id = \"...\"", where, what, line_of(t));
  return *id;
}

// Calls each(entry) for the tables of the array `key` of `t` (its [[key]] entries), if any.
template <typename Each>
void for_each_entry(const toml::table& t, const char* key, Each&& each) {
  if (const toml::array* entries = t[key].as_array())
    for (const toml::node& n : *entries) each(*n.as_table());
}

// Each [[key]] entry of a file's `root`: its keys checked against `fields`, then
// each(entry, where), `where` naming it in messages ("<file>: accelerator 'h100'").
template <typename Each>
void check_entries(const toml::table& root, const std::string& file, const char* key,
                   const std::vector<Field>& fields, Each&& each) {
  for_each_entry(root, key, [&](const toml::table& entry) {
    const std::string where = fmt::format("{}: {} '{}'", file, key, id_of(entry, file, key));
    check_fields(entry, fields, where);
    each(entry, where);
  });
}

// Checks the sub-table `key` of `t`, where there is one, against `fields`.
void check_table(const toml::table& t, const char* key, const std::vector<Field>& fields,
                 const std::string& where) {
  if (const toml::table* sub = t[key].as_table()) check_fields(*sub, fields, where + " " + key);
}

}  // namespace

void validate_catalog_file(const toml::table& root, const std::string& file) {
  check_fields(root, kTopFields, file);
  check_entries(root, file, "accelerator", kAcceleratorFields,
                [](const toml::table& a, const std::string& where) {
                  check_table(a, "peak_tflops", kPeakFields, where);
                });
  check_entries(root, file, "access", kAccessFields, [](const toml::table& c, const std::string& where) {
    for (const char* key : {"name", "programme", "url", "seen"})
      if (!c[key].is_string())
        fail("{}: no {}: every access call names itself, its programme, the URL its figures "
             "come from and the date they were seen", where, key);
    const auto programme = c["programme"].value_or(std::string());
    if (programme != "EuroHPC AI Factories" && programme != "EuroHPC JU")
      fail("{}: programme = \"{}\": use \"EuroHPC AI Factories\" or \"EuroHPC JU\"", where, programme);
  });
  check_entries(root, file, "cpu", kCpuFields, [](const toml::table& c, const std::string& where) {
    check_table(c, "flops_per_cycle", kCpuFlopFields, where);
  });
  check_entries(root, file, "system", kSystemFields, [](const toml::table& s, const std::string& where) {
    for_each_entry(s, "partition", [&](const toml::table& p) {
      const std::string pw = fmt::format("{} partition '{}'", where, id_of(p, where, "system.partition"));
      check_fields(p, kPartitionFields, pw);
      check_table(p, "intra_node", kIntraFields, pw);
      check_table(p, "network", kNetworkFields, pw);
      check_table(p, "storage", kStorageFields, pw);
      check_table(p, "slurm", kSlurmFields, pw);
    });
  });
}

}  // namespace aiscale::plan
