#include "aiscale/orchestrate/study_files.h"

#include <algorithm>
#include <filesystem>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::orchestrate {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json parse_json_file(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON ({}): restore it or remove it", path, e.what());
  }
}

}  // namespace

std::vector<StudyPoint> read_study_points(const std::string& study_dir) {
  const fs::path root = fs::absolute(study_dir);
  const fs::path points_dir = root / "points";
  std::error_code ec;
  if (!fs::is_directory(points_dir, ec))
    fail("{} is not a study directory: it has no points/ folder (create the study with "
         "`aiscale scale`, or give points/<id>/command.json yourself)", study_dir);
  std::vector<StudyPoint> points;
  for (const auto& entry : fs::directory_iterator(points_dir, ec)) {
    const fs::path cmd = entry.path() / "command.json";
    if (!entry.is_directory() || !fs::exists(cmd)) continue;
    const std::string where = cmd.string();
    json j = parse_json_file(where);
    StudyPoint p;
    p.id = entry.path().filename().string();
    p.dir = entry.path().string();
    if (!j.is_object() || !j.contains("ranks") || !j["ranks"].is_number_integer() ||
        j["ranks"].get<int>() < 1)
      fail("{}: \"ranks\" must be a positive integer", where);
    if (!j.contains("argv") || !j["argv"].is_array() || j["argv"].empty())
      fail("{}: \"argv\" must be a non-empty array of the aiscale arguments, e.g. "
           "[\"train\", \"--config\", \"x.toml\"]", where);
    p.ranks = j["ranks"].get<int>();
    for (const auto& a : j["argv"]) {
      if (!a.is_string()) fail("{}: every element of \"argv\" must be a string", where);
      p.argv.push_back(a.get<std::string>());
    }
    points.push_back(std::move(p));
  }
  if (points.empty())
    fail("{} has no points (no points/<id>/command.json): nothing to submit", study_dir);

  // study.json: the order of the points and their states, when present.
  std::map<std::string, size_t> order;
  const fs::path index = root / "study.json";
  if (fs::exists(index)) {
    json s = parse_json_file(index.string());
    if (s.contains("points") && s["points"].is_array())
      for (const auto& p : s["points"]) {
        if (!p.is_object() || !p.contains("id") || !p["id"].is_string()) continue;
        const std::string id = p["id"].get<std::string>();
        order.emplace(id, order.size());
        for (auto& q : points)
          if (q.id == id && p.contains("state") && p["state"].is_string())
            q.study_state = p["state"].get<std::string>();
      }
  }
  std::stable_sort(points.begin(), points.end(), [&](const StudyPoint& a, const StudyPoint& b) {
    auto ia = order.find(a.id), ib = order.find(b.id);
    const size_t none = order.size();
    size_t oa = ia == order.end() ? none : ia->second, ob = ib == order.end() ? none : ib->second;
    if (oa != ob) return oa < ob;
    if (a.ranks != b.ranks) return a.ranks < b.ranks;
    return a.id < b.id;
  });
  return points;
}

const PointJob* SlurmRecord::current(const std::string& point) const {
  auto it = points.find(point);
  return it == points.end() || it->second.empty() ? nullptr : &it->second.back();
}

std::string slurm_record_path(const std::string& study_dir) {
  return (fs::path(study_dir) / "slurm.json").string();
}

SlurmRecord load_slurm_record(const std::string& study_dir) {
  SlurmRecord r;
  const std::string path = slurm_record_path(study_dir);
  if (!fs::exists(path)) return r;
  json j = parse_json_file(path);
  if (!j.is_object() || j.value("format", "") != "aiscale-slurm")
    fail("{} is not aiscale's Slurm record (format \"aiscale-slurm\"): move it away", path);
  try {
    for (const auto& [id, jobs] : j.at("points").items())
      for (const auto& jj : jobs) {
        PointJob pj;
        pj.job_id = jj.at("job_id").get<std::string>();
        pj.script = jj.value("script", "");
        pj.log = jj.value("log", "");
        pj.submitted = jj.value("submitted", "");
        pj.state = jj.value("state", "");
        pj.reason = jj.value("reason", "");
        pj.exit_code = jj.value("exit_code", "");
        pj.updated = jj.value("updated", "");
        r.points[id].push_back(pj);
      }
    if (j.contains("submissions")) r.submissions = j["submissions"];
  } catch (const json::exception& e) {
    fail("{}: unexpected content ({}): move it away and submit again", path, e.what());
  }
  return r;
}

void save_slurm_record(const std::string& study_dir, const SlurmRecord& r) {
  json points = json::object();
  for (const auto& [id, jobs] : r.points) {
    json arr = json::array();
    for (const auto& pj : jobs)
      arr.push_back({{"job_id", pj.job_id}, {"script", pj.script}, {"log", pj.log},
                     {"submitted", pj.submitted}, {"state", pj.state}, {"reason", pj.reason},
                     {"exit_code", pj.exit_code}, {"updated", pj.updated}});
    points[id] = arr;
  }
  json j = {{"format", "aiscale-slurm"}, {"version", 1}, {"points", points},
            {"submissions", r.submissions}};
  atomic_write_file(slurm_record_path(study_dir), j.dump(2) + "\n");
}

}  // namespace aiscale::orchestrate
