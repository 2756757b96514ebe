// aiscale slurm script: time limits, site presets and the errors for bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "../support/error_of.h"
#include "../support/run_support.h"
#include "aiscale/core/error.h"
#include "aiscale/orchestrate/slurm_script.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/plan/time_limit.h"

using namespace aiscale;
using namespace aiscale::orchestrate;
using namespace aiscale::testsupport;

namespace {

const plan::Catalog& catalog() {
  static plan::Catalog cat = plan::load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

std::string message_of(const ScriptRequest& r) {
  try {
    resolve_job(r, &catalog());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ScriptRequest train_on(const std::string& system) {
  ScriptRequest r;
  r.system = system;
  r.argv = {"train", "--config", "my.toml"};
  return r;
}

}  // namespace

TEST(SlurmTime, AcceptsSlurmsFormsAndRefusesOthers) {
  EXPECT_EQ(plan::parse_slurm_time("90"), 90 * 60);
  EXPECT_EQ(plan::parse_slurm_time("10:30"), 630);
  EXPECT_EQ(plan::parse_slurm_time("02:00:00"), 7200);
  EXPECT_EQ(plan::parse_slurm_time("1-12"), 36 * 3600);
  EXPECT_EQ(plan::parse_slurm_time("1-00:30"), 86400 + 1800);
  EXPECT_EQ(plan::parse_slurm_time("2-01:02:03"), 2 * 86400 + 3723);
  EXPECT_EQ(plan::format_slurm_time(2 * 86400 + 3723), "2-01:02:03");
  EXPECT_EQ(plan::format_slurm_time(7200), "02:00:00");
  for (const char* bad : {"", "2h", "1:2:3:4", "01:60:00", "1-24:00:00", "0", "1-", "-5", "00:00:00"}) {
    std::string msg;
    try {
      plan::parse_slurm_time(bad);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("--time '" + std::string(bad) + "'"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("D-HH:MM:SS"), std::string::npos) << msg;
  }
}

TEST(SlurmScript, LeonardoUsesGresEightCoresPerGpuAndItsAdvisories) {
  ScriptRequest r = train_on("leonardo");
  r.nodes = 4;
  r.account = "proj";
  JobScript j = resolve_job(r, &catalog());
  EXPECT_EQ(j.label, "leonardo/booster");
  EXPECT_EQ(j.ntasks, 16);
  std::string s = render_sbatch(j);
  for (const char* line : {"#SBATCH --partition=boost_usr_prod\n", "#SBATCH --account=proj\n",
                           "#SBATCH --nodes=4\n", "#SBATCH --ntasks-per-node=4\n", "#SBATCH --gres=gpu:4\n",
                           "#SBATCH --cpus-per-task=8\n", "#SBATCH --exclusive\n",
                           "#SBATCH --signal=TERM@120\n", "export NCCL_PXN_DISABLE=1\n",
                           "module load cuda nccl openmpi\n", "mpirun -np \"${SLURM_NTASKS:-16}\" --map-by ppr:4:node"})
    EXPECT_NE(s.find(line), std::string::npos) << line << "\n" << s;
}

// LUMI-G's GPUs are AMD's: aiscale's GPU code is CUDA, so a GPU job there is refused with
// the reason (the planner shows LUMI-G only as a what-if).
TEST(SlurmScript, LumiGpuJobsAreRefusedAndMareNostrumSelectsByQos) {
  const std::string why = error_of([&] { resolve_job(train_on("lumi"), &catalog()); });
  EXPECT_NE(why.find("lumi/lumi-g"), std::string::npos) << why;
  EXPECT_NE(why.find("not NVIDIA's"), std::string::npos) << why;
  EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
  std::string mn5 = render_sbatch(resolve_job(train_on("marenostrum5"), &catalog()));
  EXPECT_EQ(mn5.find("--partition"), std::string::npos) << mn5;
  EXPECT_NE(mn5.find("#SBATCH --qos=acc_ehpc\n"), std::string::npos) << mn5;
  EXPECT_NE(mn5.find("#SBATCH --cpus-per-task=20\n"), std::string::npos) << mn5;
  for (const char* sys : {"karolina", "meluxina", "vega", "jupiter"})
    EXPECT_NO_THROW(render_sbatch(resolve_job(train_on(sys), &catalog()))) << sys;
}

TEST(SlurmScript, AStudyPointTakesTheNodesItsRanksNeed) {
  ScriptRequest r = train_on("leonardo/booster");
  r.ranks = 2;
  JobScript j = resolve_job(r, &catalog());
  EXPECT_EQ(j.nodes, 1);
  EXPECT_EQ(j.tasks_per_node, 2);
  EXPECT_EQ(j.gpus_per_node, 2);
  r.ranks = 6;
  j = resolve_job(r, &catalog());
  EXPECT_EQ(j.nodes, 2);
  EXPECT_EQ(j.ntasks, 6);
  EXPECT_NE(render_sbatch(j).find("#SBATCH --ntasks=6\n"), std::string::npos);
}

TEST(SlurmScript, BadInputNamesTheInputAndTheFix) {
  EXPECT_NE(message_of(train_on("nosuchsystem")).find("unknown system 'nosuchsystem'"), std::string::npos);
  std::string m = message_of(train_on("leonardo/nosuch"));
  EXPECT_NE(m.find("no partition 'nosuch'"), std::string::npos) << m;
  EXPECT_NE(m.find("leonardo/booster"), std::string::npos) << m;
  m = message_of(train_on("leonardo/dcgp"));
  EXPECT_NE(m.find("no Slurm preset"), std::string::npos) << m;
  ScriptRequest r = train_on("leonardo");
  r.gpus_per_node = 8;
  m = message_of(r);
  EXPECT_NE(m.find("--gpus-per-node 8"), std::string::npos) << m;
  EXPECT_NE(m.find("4 GPUs per node"), std::string::npos) << m;
  r = train_on("leonardo");
  r.time = "2 hours";
  EXPECT_NE(message_of(r).find("--time '2 hours'"), std::string::npos);
  r.time = "2-00:00:00";
  m = message_of(r);
  EXPECT_NE(m.find("longer than leonardo/booster's limit of 1-00:00:00"), std::string::npos) << m;
  r.time = "01:00";
  m = message_of(r);
  EXPECT_NE(m.find("--signal-lead 120 s is not shorter"), std::string::npos) << m;
  r = train_on("leonardo");
  r.argv.clear();
  EXPECT_NE(message_of(r).find("nothing to run"), std::string::npos);
}

TEST(SlurmScript, CatalogueRefusesUnknownOrBadSlurmKeys) {
  auto dir = temp_dir("slurm-catalog");
  auto write = [&](const std::string& table) {
    std::ofstream(dir / "x.toml") << "[[system]]\nid = \"lumi\"\n  [[system.partition]]\n  id = \"lumi-g\"\n"
                                     "  [system.partition.slurm]\n" << table;
  };
  auto load_error = [&] {
    try {
      plan::load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems", {(dir / "x.toml").string()});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  write("partiton = \"x\"\n");
  std::string m = load_error();
  EXPECT_NE(m.find("unknown key 'partiton'"), std::string::npos) << m;
  EXPECT_NE(m.find("slurm"), std::string::npos) << m;
  write("max_time = \"forever\"\n");
  EXPECT_NE(load_error().find("max_time 'forever'"), std::string::npos);
  write("gpu_request = \"gpus\"\n");
  EXPECT_NE(load_error().find("gpu_request = \"gpus\" is unknown"), std::string::npos);
  write("partition = \"small-g\"\n");  // a user file overrides one key of the preset
  EXPECT_EQ(load_error(), "");
}

TEST(SlurmScript, CliWritesAScriptOrSaysWhatIsWrong) {
  auto dir = temp_dir("slurm-cli");
  auto r = run_aiscale("slurm script --system vega --nodes 2 -o " + (dir / "job.sbatch").string() +
                       " -- bench language --model gpt2-124m");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string s = read_bytes(dir / "job.sbatch");
  EXPECT_NE(s.find("#SBATCH --partition=gpu\n"), std::string::npos) << s;
  EXPECT_NE(s.find("#SBATCH --gres=gpu:4\n"), std::string::npos) << s;
  EXPECT_NE(s.find(" bench language --model gpt2-124m \"$@\""), std::string::npos) << s;
  // Without a container the job runs this binary by its absolute path; in a container, the
  // image's own aiscale (this host's path means nothing there).
  EXPECT_NE(s.find("AISCALE=${AISCALE:-/"), std::string::npos) << s;
  r = run_aiscale("slurm script --system vega --nodes 2 --container /images/aiscale.sif -o " +
                  (dir / "c.sbatch").string() + " -- bench language --model gpt2-124m");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  s = read_bytes(dir / "c.sbatch");
  EXPECT_NE(s.find("AISCALE=${AISCALE:-aiscale}"), std::string::npos) << s;
  EXPECT_NE(s.find("/images/aiscale.sif \"$AISCALE\" bench language"), std::string::npos) << s;
  r = run_aiscale("slurm script --system vega --gpus-per-node 6 -- train --config x.toml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("vega/gpu has 4 GPUs per node"), std::string::npos) << r.output;
  r = run_aiscale("slurm script --time 1:2:3:4 -- train --config x.toml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--time '1:2:3:4'"), std::string::npos) << r.output;
}

// Every text that goes into a script: one with a newline is refused naming its option (it
// would become a line of its own, a command); values of #SBATCH lines have no blanks or
// quotes; names in shell syntax follow their grammar.
TEST(SlurmScript, AValueWithANewlineCannotBecomeALineOfItsOwn) {
  const std::string evil = "x\ntouch /tmp/aiscale-pwned";
  auto refused = [&](const std::function<void(ScriptRequest&)>& set, const std::string& option) {
    ScriptRequest r = train_on("leonardo");
    r.account = "proj";
    set(r);
    const std::string m = message_of(r);
    EXPECT_NE(m.find(option), std::string::npos) << option << ": " << m;
    EXPECT_NE(m.find("x\\ntouch /tmp/aiscale-pwned"), std::string::npos) << m;  // shown escaped
  };
  refused([&](ScriptRequest& r) { r.job_name = evil; }, "--job-name");
  refused([&](ScriptRequest& r) { r.partition = evil; }, "--partition");
  refused([&](ScriptRequest& r) { r.account = evil; }, "--account");
  refused([&](ScriptRequest& r) { r.qos = evil; }, "--qos");
  refused([&](ScriptRequest& r) { r.output = evil; }, "--output");
  refused([&](ScriptRequest& r) { r.chdir = evil; }, "--chdir");
  refused([&](ScriptRequest& r) { r.prelude = {evil}; }, "--prelude");
  refused([&](ScriptRequest& r) { r.env = {"NCCL_DEBUG=" + evil}; }, "--env NCCL_DEBUG");
  refused([&](ScriptRequest& r) { r.container = evil; }, "--container");
  refused([&](ScriptRequest& r) { r.aiscale = evil; }, "--aiscale");
  refused([&](ScriptRequest& r) { r.cpu_bind = evil; }, "--cpu-bind");
  refused([&](ScriptRequest& r) { r.srun_mpi = evil; }, "--srun-mpi");
  refused([&](ScriptRequest& r) { r.argv.push_back(evil); }, "argument 4 of the aiscale command");

  ScriptRequest r = train_on("leonardo");
  r.env = {"A;touch /tmp/x=1"};
  EXPECT_NE(message_of(r).find("is not an environment variable name"), std::string::npos) << message_of(r);
  r = train_on("leonardo");
  r.partition = "boost usr";
  EXPECT_NE(message_of(r).find("--partition 'boost usr' holds ' '"), std::string::npos) << message_of(r);
  r = train_on("leonardo");
  r.srun_mpi = "pmix}\"; touch /tmp/x; \"";
  EXPECT_NE(message_of(r).find("--srun-mpi"), std::string::npos) << message_of(r);
}

// What is quoted stays one argument: the script, run with a stand-in srun, passes hostile
// text to aiscale word for word and runs nothing of it.
TEST(SlurmScript, HostileTextReachesTheCommandAsDataOnly) {
  auto dir = temp_dir("slurm-hostile");
  const std::string pwned = (dir / "pwned").string();
  ScriptRequest r;
  r.argv = {"train", "--config", "'; touch " + pwned + "; '", "$(touch " + pwned + ")"};
  r.env = {"NOTE=`touch " + pwned + "` $HOME \"q\""};
  r.cpu_bind = "cores; touch " + pwned;
  r.aiscale = "/opt/ai scale/bin/aiscale";
  r.pass_script_args = false;
  const std::string script = render_sbatch(resolve_job(r, nullptr));
  std::ofstream(dir / "job.sbatch") << script;
  fs::create_directories(dir / "bin");
  std::ofstream(dir / "bin/srun") << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > " +
                                         (dir / "args").string() + "\nprintf '%s\\n' \"$NOTE\" >> " +
                                         (dir / "args").string() + "\n";
  fs::permissions(dir / "bin/srun", fs::perms::owner_all);
  auto out = run_command("cd " + dir.string() + " && PATH=" + (dir / "bin").string() + ":$PATH bash job.sbatch");
  EXPECT_EQ(out.exit_code, 0) << out.output << script;
  EXPECT_FALSE(fs::exists(pwned)) << script;
  const std::string args = read_bytes(dir / "args");
  for (const std::string& a : {std::string("/opt/ai scale/bin/aiscale\ntrain\n--config\n'; touch ") + pwned +
                                   "; '\n$(touch " + pwned + ")\n",
                               "--cpu-bind=cores; touch " + pwned + "\n",
                               "`touch " + pwned + "` $HOME \"q\"\n"})
    EXPECT_NE(args.find(a), std::string::npos) << a << "\n---\n" << args;
}

// The command is checked when the script is written, not when the job starts after the
// queue; zero counts that mean nothing are refused naming the flag.
TEST(SlurmScript, CliChecksTheCommandAndRefusesMeaninglessZeros) {
  auto dir = temp_dir("slurm-cli-check");
  const std::string out = (dir / "job.sbatch").string();
  auto r = run_aiscale("slurm script -o " + out + " -- trian --config x.toml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'trian' is not an aiscale command (the commands are train, bench,"), std::string::npos)
      << r.output;
  r = run_aiscale("slurm script -o " + out + " -- train --cofnig x.toml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--cofnig"), std::string::npos) << r.output;
  r = run_aiscale("slurm script -o " + out + " -- bench language --steps 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  // A config path is the job's: it need not exist where the script is written.
  r = run_aiscale("slurm script -o " + out + " -- train --config /on/the/cluster.toml");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  for (const char* flag : {"--nodes", "--ranks", "--tasks-per-node", "--cpus-per-task"}) {
    r = run_aiscale(std::string("slurm script ") + flag + " 0 -- train --config x.toml");
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.output.find(std::string(flag) + ": '0'"), std::string::npos) << r.output;
  }
  // Where 0 means something, it is accepted and says so in --help.
  r = run_aiscale("slurm script --gpus-per-node 0 --signal-lead 0 -- train --config x.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("gpus-per-node="), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--signal="), std::string::npos) << r.output;
  r = run_aiscale("slurm script --help");
  EXPECT_NE(r.output.find("0: a job without GPUs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0: no signal"), std::string::npos) << r.output;

  // More nodes than the partition has.
  r = run_aiscale("slurm script --system leonardo --nodes 100000 -- train --config x.toml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("but leonardo/booster has"), std::string::npos) << r.output;
}
