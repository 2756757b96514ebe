// `aiscale tune` over training runs (study.backend = "train") on this machine's CPU: the
// quick-start model on Debian's fortunes, its learning rate and warm-up searched by 12 trials
// two at a time, asynchronous successive halving stopping most of them early; the study is
// interrupted by SIGTERM part-way and run again, and must finish without repeating a trial;
// its report draws in Chromium. A trial of 2 MPI ranks (aiscale launch), a trial whose
// config is impossible (recorded, the study goes on) and the refused studies.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "../support/background.h"
#include "../support/chromium.h"
#include "../support/quickstart_study.h"
#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_bytes(p)); }

// Each trial's training steps in its metrics.jsonl: a trial run twice would repeat steps.
std::vector<int64_t> logged_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  for (const auto& j : read_metrics(run_dir)) steps.push_back(j["step"].get<int64_t>());
  return steps;
}

int64_t trials_done(const fs::path& trials) {
  int64_t n = 0;
  if (!fs::exists(trials)) return 0;
  for (const auto& e : fs::directory_iterator(trials)) {
    if (e.path().extension() != ".json") continue;
    const auto j = nlohmann::json::parse(read_bytes(e.path()), nullptr, false);
    if (j.is_object() && (j.value("status", "") == "finished" || j.value("status", "") == "stopped")) ++n;
  }
  return n;
}

TEST(TuneTrain, AshaSearchOfTheQuickStartSurvivesSigtermAndDrawsItsReport) {
  const fs::path dir = temp_dir("tune-train-asha");
  const std::string study = quickstart_lr_study(dir);

  // First run, ended by SIGTERM once a few trials are done.
  const fs::path log1 = dir / "first.log";
  const pid_t pid = start_aiscale({"tune", study}, log1);
  ASSERT_GT(pid, 0);
  wait_until([&] { return trials_done(dir / "out/trials") >= 3; }, 300);
  ::kill(pid, SIGTERM);
  const int code = wait_exit(pid, 300);
  const std::string first = read_bytes(log1);
  EXPECT_EQ(code, 0) << first;
  EXPECT_NE(first.find("interrupted: run `aiscale tune"), std::string::npos) << first;
  // What was done before the signal, kept to compare after the rerun.
  std::map<std::string, std::string> done_before;
  for (const auto& e : fs::directory_iterator(dir / "out/trials")) {
    if (e.path().extension() != ".json") continue;
    const auto j = read_json(e.path());
    const std::string s = j["status"];
    if (s == "finished" || s == "stopped") done_before[j["name"]] = read_bytes(dir / "out/trials" / j["name"].get<std::string>() / "metrics.jsonl");
  }
  ASSERT_GE(done_before.size(), 3u);

  // The rerun finishes the study without running those again.
  auto r = run_aiscale("tune " + study);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(done_before.size()) + " done before"), std::string::npos) << r.output;
  for (const auto& [name, metrics] : done_before)
    EXPECT_EQ(read_bytes(dir / "out/trials" / name / "metrics.jsonl"), metrics) << name << " ran again";
  const auto results = read_json(dir / "out/results.json");
  ASSERT_EQ(results["trials"].size(), 13u);  // the default and 12 trials
  int64_t stopped = 0, finished = 0;
  for (const auto& t : results["trials"]) {
    const std::string name = t["name"];
    const auto steps = logged_steps(dir / "out/trials" / name);
    EXPECT_EQ(std::set<int64_t>(steps.begin(), steps.end()).size(), steps.size()) << name << ": a step logged twice";
    if (t["trial"].get<int64_t>() < 0) {
      EXPECT_EQ(t["status"], "finished");  // the baseline always trains to the end
      continue;
    }
    stopped += t["status"] == "stopped";
    finished += t["status"] == "finished";
    if (t["status"] == "stopped") {
      EXPECT_FALSE(fs::exists(dir / "out/trials" / name / "checkpoints")) << name;
      bool stopped_at_rung = false;
      for (const auto& rung : t["rungs"]) stopped_at_rung |= !rung["went_on"].get<bool>();
      EXPECT_TRUE(stopped_at_rung) << t.dump();
    }
  }
  EXPECT_GE(stopped, 6) << "ASHA should stop at least half of the 12 trials early";
  EXPECT_GE(finished, 1);
  EXPECT_EQ(stopped + finished, 12);
  // The best finished trial beats the default configuration.
  ASSERT_TRUE(results["best"].is_string()) << results.dump(1);
  const double best = results["trials"][0]["val_loss"];
  EXPECT_EQ(results["trials"][0]["name"], results["best"]);
  EXPECT_LT(best, results["default_val_loss"].get<double>()) << r.output;
  EXPECT_NE(r.output.find("better than the default"), std::string::npos) << r.output;
  // results.csv: the leaderboard, best first.
  const std::string csv = read_bytes(dir / "out/results.csv");
  EXPECT_EQ(csv.rfind("rank,trial,status,last_step,val_loss", 0), 0u) << csv;
  EXPECT_NE(csv.find("\n1," + results["best"].get<std::string>() + ",finished,60,"), std::string::npos) << csv;
  // best/config.toml trains as it is.
  r = run_aiscale("train -c " + (dir / "out/best/config.toml").string() + " --set train.steps=2 --set train.warmup_steps=0 --set run.dir=" +
                  (dir / "runs").string() + " --set run.name=best -q");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // The report: every trial's curve and the keys' importance, drawn in Chromium.
  r = run_aiscale("report " + (dir / "out").string() + " -o " + (dir / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  BrowserView v = open_in_chromium(dir / "r.html", dir);
  EXPECT_EQ(v.status["done"], "true") << v.status["text"] << "\n" << v.log;
  EXPECT_EQ(v.status["charts"], "2");
  EXPECT_EQ(v.status["rendered"], "2") << v.status["text"];
  EXPECT_EQ(v.status["errors"], "0") << v.status["text"];
  for (const char* id : {"tune_curves", "tune_importance"}) EXPECT_TRUE(chart_drawn(v.dom, id)) << id;
  fs::remove_all(dir);
}

// A trial of 2 MPI ranks (started through aiscale launch), and a trial whose drawn config is
// impossible: it is recorded as failed with the reason, and the study goes on.
TEST(TuneTrain, TwoRankTrialsAndAFailedTrial) {
  const fs::path dir = temp_dir("tune-train-ranks");
  write_byte_shards(dir);
  const fs::path base = tiny_config(dir);
  std::ofstream(dir / "study.toml")
      << "[study]\nname = \"ranks\"\nbackend = \"train\"\nsearch = \"grid\"\ndir = \"" << (dir / "out").string()
      << "\"\n[train]\nconfig = \"" << base.filename().string() << "\"\nranks_per_trial = 2\nparallel_trials = 1\n"
      << "[fixed]\n\"train.steps\" = 4\n\"train.eval_every\" = 2\n"
      << "[params.\"model.n_head\"]\ntype = \"choice\"\nvalues = [2, 3]\n";
  auto r = run_aiscale("tune " + (dir / "study.toml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = read_json(dir / "out/results.json");
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& t : results["trials"]) by_name[t["name"]] = t;
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name["trial-000"]["status"], "finished") << r.output;
  EXPECT_EQ(by_name["trial-001"]["status"], "failed");
  EXPECT_NE(by_name["trial-001"]["error"].get<std::string>().find("n_head"), std::string::npos)
      << by_name["trial-001"].dump();
  const auto summary = read_json(dir / "out/trials/trial-000/summary.json");
  EXPECT_EQ(summary["layout"]["dp"], 2) << summary.dump();
  EXPECT_NE(r.output.find("1 failed"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// SIGUSR1 gives a run up: the step finishes, no checkpoint is written, the summary says
// stopped and the exit status is 0 (aiscale tune ends the trials it stops this way).
TEST(TuneTrain, Sigusr1StopsATrainRunWithoutACheckpoint) {
  const fs::path dir = temp_dir("tune-train-usr1");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  const fs::path log = dir / "train.log";
  const pid_t pid = start_aiscale({"train", "-c", cfg, "--set", "train.steps=100000", "--set", "run.name=usr1", "-q"}, log);
  ASSERT_GT(pid, 0);
  const fs::path run = dir / "runs/usr1";
  wait_until([&] { return fs::exists(run / "metrics.jsonl") && read_metrics(run).size() >= 3; }, 120);
  ::kill(pid, SIGUSR1);
  const int code = wait_exit(pid, 120);
  const std::string out = read_bytes(log);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("stopped by SIGUSR1 after step"), std::string::npos) << out;
  const auto summary = read_json(run / "summary.json");
  EXPECT_EQ(summary["status"], "stopped");
  EXPECT_LT(summary["steps"].get<int64_t>(), 100000);
  if (fs::exists(run / "checkpoints"))
    for (const auto& e : fs::directory_iterator(run / "checkpoints")) ADD_FAILURE() << "checkpoint written: " << e.path();
  fs::remove_all(dir);
}

// AISCALE_START_GATE: the run sets itself up and trains nothing until the gate file exists.
TEST(TuneTrain, StartGateHoldsTheFirstStepUntilItsFileExists) {
  const fs::path dir = temp_dir("tune-train-gate");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  const fs::path gate = dir / "gate", log = dir / "train.log", run = dir / "runs/gated";
  const pid_t pid = start_aiscale({"train", "-c", cfg, "--set", "train.steps=4", "--set", "run.name=gated", "-q"}, log,
                                  {{"AISCALE_START_GATE", gate.string()}});
  ASSERT_GT(pid, 0);
  // Set up (its run directory written) but no step taken while the gate is closed.
  wait_until([&] { return fs::exists(run / "config.toml"); }, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the run did not wait at its gate: " << read_bytes(log);
  EXPECT_TRUE(!fs::exists(run / "metrics.jsonl") || read_metrics(run).empty()) << read_bytes(log);
  std::ofstream(gate) << "open\n";
  EXPECT_EQ(wait_exit(pid, 60), 0) << read_bytes(log);
  EXPECT_EQ(read_json(run / "summary.json")["status"], "finished");
  EXPECT_EQ(read_metrics(run).size(), 4u);
  fs::remove_all(dir);
}

// The keys of an image classifier's config (train.lr of the vision schema), its validation
// passes at the eval steps, the best config written as a vision config.
TEST(TuneTrain, ResNetTrialsSearchTheVisionConfigsKeys) {
  const fs::path dir = temp_dir("tune-train-resnet");
  std::ofstream(dir / "study.toml")
      << "[study]\nname = \"vt\"\nbackend = \"train\"\ntrials = 2\ndir = \"" << (dir / "out").string()
      << "\"\n[train]\nconfig = \"" << AISCALE_SOURCE_DIR << "/configs/fashion-mnist-resnet.toml\"\n"
      << "set = [\"train.eval_batches=2\", \"train.batch_size=32\"]\nparallel_trials = 2\n"
      << "[fixed]\n\"train.steps\" = 6\n\"train.eval_every\" = 3\n"
      << "[params.\"train.lr\"]\ntype = \"log-uniform\"\nlow = 0.01\nhigh = 0.3\n";
  auto r = run_aiscale("tune " + (dir / "study.toml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = read_json(dir / "out/results.json");
  ASSERT_EQ(results["trials"].size(), 3u);
  for (const auto& t : results["trials"]) {
    EXPECT_EQ(t["status"], "finished") << t.dump();
    EXPECT_EQ(t["curve"].size(), 2u) << t.dump();  // validation at steps 3 and 6
  }
  const std::string best = read_bytes(dir / "out/best/config.toml");
  EXPECT_NE(best.find("resnet-small"), std::string::npos) << best;
  r = run_aiscale("train -c " + (dir / "out/best/config.toml").string() + " --set train.steps=1 --set run.dir=" +
                  (dir / "runs").string() + " -q");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  fs::remove_all(dir);
}

// The pids of this user's `aiscale train` processes whose command line holds `marker`
// (the ranks; not mpirun or aiscale launch, whose argv[0] is another program or command).
std::vector<pid_t> train_ranks(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> argv;
    for (size_t a = 0; a < cmd.size();) {
      const size_t z = cmd.find('\0', a);
      argv.push_back(cmd.substr(a, z == std::string::npos ? std::string::npos : z - a));
      a = z == std::string::npos ? cmd.size() : z + 1;
    }
    if (argv.size() > 1 && argv[0] == AISCALE_BINARY && argv[1] == "train" && cmd.find(marker) != std::string::npos)
      out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// SIGUSR1 on one rank of two: the ranks agree, both stop after the same step, and no rank
// writes a checkpoint. A study of training runs run under a launcher is refused on every rank.
TEST(TuneTrain, Sigusr1OnOneOfTwoRanksStopsBothWithoutACheckpoint) {
  const fs::path dir = temp_dir("tune-train-usr1-ranks");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  const fs::path log = dir / "launch.log", run = dir / "runs/usr1two";
  const pid_t pid = start_aiscale({"launch", "-n", "2", "--", "train", "-c", cfg, "--set", "train.steps=100000",
                                   "--set", "run.name=usr1two", "-q"}, log);
  ASSERT_GT(pid, 0);
  wait_until([&] { return fs::exists(run / "metrics.jsonl") && read_metrics(run).size() >= 3; }, 120);
  const auto ranks = train_ranks("run.name=usr1two");
  ASSERT_EQ(ranks.size(), 2u) << read_bytes(log);
  ::kill(ranks[1], SIGUSR1);
  EXPECT_EQ(wait_exit(pid, 120), 0) << read_bytes(log);
  EXPECT_EQ(read_json(run / "summary.json")["status"], "stopped") << read_bytes(log);
  if (fs::exists(run / "checkpoints"))
    for (const auto& e : fs::directory_iterator(run / "checkpoints")) ADD_FAILURE() << "checkpoint written: " << e.path();

  std::ofstream(dir / "study.toml") << "[study]\nbackend = \"train\"\ntrials = 2\ndir = \"" << (dir / "out").string()
                                    << "\"\n[train]\nconfig = \"" << cfg << "\"\n"
                                    << "[params.\"train.lr\"]\ntype = \"log-uniform\"\nlow = 1e-4\nhigh = 1e-2\n";
  auto r = run_aiscale("launch -n 2 -- tune " + (dir / "study.toml").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launch: 2 of 2 rank(s) failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("run it as one process, not under mpirun"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out/trials")) << "no trial may start";
  fs::remove_all(dir);
}

}  // namespace
