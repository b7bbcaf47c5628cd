// Runs across emulated hosts (scripts/hosts.sh: network namespaces on this machine, TCP between
// them, shared memory inside one): `trillion launch --hostfile` trains the one-process run
// (losses and weights within 1e-5, `trillion compare`), summary.json's link_bytes splits the
// engine's bytes into inside a host and across hosts, and the hosts' NICs (their veth byte
// counters) carried the engine's cross-host bytes plus TCP/IP and Open MPI framing and the job's
// start-up and teardown (kFramingShare of the bytes plus kStartupBytes). cp's gradient reduction
// (dp_cp, whose members are on both hosts) runs the hierarchical all-reduce, whose messages the
// mesh counts by their peer's host. Where namespaces cannot be made (not root, no `ip`), the tests
// skip and say why. Each test makes its own hosts under its own name prefix and subnet and removes
// them. `bench machine` across hosts measures the link between them apart from the one inside a
// host.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::read_json;
using testing::run_shell;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = testing::one_thread_per_rank();
// Measured (docs/multi-host.md): the NICs carry 45-65 KB more than the engine's cross-host bytes
// (1.3-1.6 MB here): Open MPI's wire-up, communicator splits and daemons (start-up, the ranks'
// output, shutdown) and the TCP/IP headers (MTU 9000).
constexpr double kFramingShare = 0.03, kStartupBytes = 96 * 1024;

// Emulated hosts for one test: `up` on construction, `down` on destruction.
class Hosts {
 public:
  // gbps > 0 limits each host's NIC (hosts.sh --gbps).
  Hosts(const std::string& prefix, const std::string& net, int n, int slots, double gbps = 0)
      : prefix_(prefix) {
    env_ = "TRILLION_HOSTS_PREFIX=" + prefix + " TRILLION_HOSTS_NET=" + net + " ";
    script_ = std::string(TRILLION_SOURCE_DIR) + "/scripts/hosts.sh";
    const auto check = run_shell(env_ + script_ + " check 2>&1");
    if (check.exit_code != 0) {
      why_not_ = check.output;
      return;
    }
    const auto up = run_shell(env_ + script_ + " up " + std::to_string(n) + " --slots " +
                              std::to_string(slots) +
                              (gbps > 0 ? " --gbps " + std::to_string(gbps) : "") + " 2>&1");
    if (up.exit_code != 0) {
      why_not_ = "hosts.sh up failed: " + up.output;
      return;
    }
    hostfile_ = up.output.substr(0, up.output.find('\n'));
    hosts_ = n;
  }
  ~Hosts() { run_shell(env_ + script_ + " down 2>&1"); }
  const std::string& why_not() const { return why_not_; }
  const std::string& hostfile() const { return hostfile_; }
  // Bytes all hosts' NICs sent (the bridge ends of their veths received them).
  double sent_bytes() const {
    double total = 0;
    for (int h = 1; h <= hosts_; ++h) {
      std::ifstream in("/sys/class/net/" + prefix_ + std::to_string(h) + "-v/statistics/rx_bytes");
      double b = 0;
      in >> b;
      total += b;
    }
    return total;
  }

 private:
  std::string prefix_, env_, script_, hostfile_, why_not_;
  int hosts_ = 0;
};

std::string flags() {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.d_model=64 --set model.ffn_hidden=128 "
         "--set train.micro_batch=16 --set train.grad_accum=2";
}

struct Layout {
  std::string name, sets, prefix, net;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class MultiHost : public ::testing::TestWithParam<Layout> {};

TEST_P(MultiHost, TrainsTheOneProcessRunAndTheWireCarriesTheCrossHostBytes) {
  const Layout l = GetParam();
  Hosts hosts(l.prefix, l.net, 2, 2);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("h34_multihost_" + l.name);
  const double before = hosts.sent_bytes();
  const auto r = run_trillion(kEnv + "launch -n 4 --hostfile " + hosts.hostfile() + " -- " +
                              flags() + " --run-dir " + run + l.sets);
  const double wire = hosts.sent_bytes() - before;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  const auto links = read_json(run + "/summary.json")["link_bytes"];
  EXPECT_EQ(links["hosts"], 2);
  const double across = links["across_hosts"].get<double>();
  EXPECT_GT(across, 0);
  EXPECT_GT(links["inside_host"].get<double>(), 0);
  // The world communicator's few collectives (the losses' sums): members on both hosts, the
  // library's algorithm, so which of their bytes crossed is not known.
  const double world = links["mixed"].get<double>();
  EXPECT_LT(world, 4096);
  std::printf("%s: engine across hosts %.0f B, NICs sent %.0f B (+%.2f%%)\n", l.name.c_str(),
              across, wire, 100 * (wire / across - 1));
  EXPECT_GE(wire, across);
  EXPECT_LE(wire, (across + world) * (1 + kFramingShare) + kStartupBytes);
}

// 2 hosts x 2 slots: ranks 0, 1 on the first host, 2, 3 on the second. The mesh's order (tp
// fastest, then cp, dp, pp) keeps tp (and cp) inside a host and puts dp (pp) across: dp 2 x tp 2,
// pp 2 x dp 2 and cp 2 x dp 2 (6, 5 and 7 s here).
const auto kName = [](const auto& info) { return info.param.name; };
INSTANTIATE_TEST_SUITE_P(
    Layouts, MultiHost,
    ::testing::Values(
        Layout{"dp2_tp2", " --set parallel.dp=2 --set parallel.tp=2", "tra", "10.214.1"},
        Layout{"pp2_dp2", " --set parallel.pp=2 --set parallel.dp=2", "trb", "10.214.2"},
        Layout{"cp2_dp2",
               " --set parallel.cp=2 --set parallel.dp=2 --set parallel.allreduce=hierarchical",
               "trc", "10.214.3"}),
    kName);

// Host failure with --elastic: 4 hosts of one slot run dp 4; the host of rank 2 dies after
// step 3 (the drill kills its only rank). The supervisor names the host and its ranks, restarts
// without it at dp 2 with twice the accumulation (the global batch of 8 kept) from the step-2
// checkpoint, and the steps after the restart match a run that resumed that checkpoint at dp 2
// (1e-5); summary.json records the failure and the layouts before and after.
TEST(MultiHostElastic, ALostHostIsLeftOutAndTheRunGoesOnAtTheLayoutTheRestHold) {
  Hosts hosts("trd", "10.214.4", 4, 1);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string base = "train " + config_path("tiny.toml") +
                           " --quiet --set train.steps=6 --set checkpoint.interval=2";
  const std::string run = fresh_dir("h34_elastic");
  const auto r =
      run_trillion(kEnv + "launch -n 4 --hostfile " + hosts.hostfile() +
                   " --max-restarts 1 --elastic --fail-at 3:2 -- " + base + " --run-dir " + run +
                   " --set parallel.dp=4 --set train.micro_batch=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[host trd3: rank(s) 2]"), std::string::npos) << r.output;
  const auto summary = read_json(run + "/summary.json");
  ASSERT_EQ(summary["failures"].size(), 1u);
  const auto& f = summary["failures"][0];
  EXPECT_EQ(f["host"], "trd3");
  EXPECT_EQ(f["resumed_from"], 2);
  EXPECT_EQ(f["layout_before"]["dp"], 4);
  EXPECT_EQ(f["layout_after"]["dp"], 2);
  EXPECT_EQ(f["layout_after"]["micro_batch"], 4);
  EXPECT_EQ(f["layout_after"]["grad_accum"], 2);
  EXPECT_EQ(f["layout_after"]["hosts"], 3);
  EXPECT_GT(f["lost_seconds"].get<double>(), 0);
  EXPECT_EQ(summary["parallel"]["dp"], 2);

  // The reference: dp 4 to the checkpoint of step 2, then a resume at dp 2 (one host, no drill).
  const std::string ref = fresh_dir("h34_elastic_ref");
  ASSERT_EQ(run_trillion(kEnv + "launch -n 4 -- " + base + " --run-dir " + ref +
                         " --set parallel.dp=4 --set train.micro_batch=8 --set train.steps=2")
                .exit_code,
            0);
  const auto resumed = run_trillion(kEnv + "launch -n 2 -- " + base + " --run-dir " + ref +
                                    " --resume --set parallel.dp=2 --set train.micro_batch=4 "
                                    "--set train.grad_accum=2");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto got = testing::read_metrics(run), want = testing::read_metrics(ref);
  ASSERT_EQ(got.size(), 6u);
  ASSERT_EQ(want.size(), 6u);
  for (size_t i = 2; i < 6; ++i) {
    EXPECT_EQ(got[i]["step"], want[i]["step"]);
    EXPECT_NEAR(got[i]["loss"].get<double>(), want[i]["loss"].get<double>(), 1e-5)
        << "step " << i + 1;
  }
}

// Without --elastic a failed host's ranks restart on the same hosts once it is back (here at
// once: the drill killed a rank, not the namespace), and the finished run is bitwise the clean
// run on those hosts.
TEST(MultiHostRestart, WithoutElasticTheFinishedRunIsBitwiseTheCleanRun) {
  Hosts hosts("tre", "10.214.5", 2, 1);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string launch = kEnv + "launch -n 2 --hostfile " + hosts.hostfile() + " ";
  const std::string train = " -- train " + config_path("tiny.toml") +
                            " --quiet --set train.steps=6 --set checkpoint.interval=2 --set "
                            "parallel.dp=2 --run-dir ";
  const std::string clean = fresh_dir("h34_restart_clean"), drilled = fresh_dir("h34_restart");
  ASSERT_EQ(run_trillion(launch + train + clean).exit_code, 0);
  const auto r = run_trillion(launch + "--max-restarts 1 --fail-at 3:1" + train + drilled);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[host tre2: rank(s) 1]"), std::string::npos) << r.output;
  const auto summary = read_json(drilled + "/summary.json");
  ASSERT_EQ(summary["failures"].size(), 1u);
  EXPECT_EQ(summary["failures"][0]["resumed_from"], 2);
  const auto cmp = run_trillion("compare " + clean + " " + drilled + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_NE(cmp.output.find("bitwise equal"), std::string::npos) << cmp.output;
}

// A cut link (the host's veth down: its processes live on and the others wait in a collective)
// is detected by the heartbeat watchdog and named by launch's TCP probe within the heartbeat
// timeout + 10 s, not waited on forever.
TEST(MultiHostRestart, ACutLinkIsNamedWithinTheHeartbeatTimeout) {
  Hosts hosts("trf", "10.214.6", 2, 1);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string run = fresh_dir("h34_cut");
  constexpr int kHeartbeat = 3;
  const std::string launch = kEnv + std::string(TRILLION_BINARY) + " launch -n 2 --hostfile " +
                             hosts.hostfile() + " --heartbeat-timeout " +
                             std::to_string(kHeartbeat) + " -- train " + config_path("tiny.toml") +
                             " --quiet --set train.steps=1000000 --set parallel.dp=2 " +
                             "--run-dir " + run + " > " + run + ".out 2>&1";
  const std::string script = std::string(TRILLION_SOURCE_DIR) + "/scripts/hosts.sh";
  // Starts the job, waits for its first steps, cuts trf2's link, and prints the seconds from the
  // cut to the job's end; the job's status is the line's.
  const auto r =
      run_shell(launch + " & pid=$!; for i in $(seq 1200); do [ -s " + run +
                "/metrics.jsonl ] && break; sleep 0.05; done; sleep 1; t0=$(date +%s.%N); "
                "TRILLION_HOSTS_PREFIX=trf TRILLION_HOSTS_NET=10.214.6 " +
                script +
                " cut trf2; wait $pid; status=$?; t1=$(date +%s.%N); awk \"BEGIN { print "
                "\\\"seconds\\\", $t1 - $t0 }\"; exit $status");
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::string out = testing::slurp(run + ".out");
  EXPECT_NE(out.find("[host trf2 does not answer: rank(s) 1]"), std::string::npos) << out;
  const size_t at = r.output.find("seconds ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double seconds = std::stod(r.output.substr(at + 8));
  std::printf("cut link named %.1f s after the cut (heartbeat timeout %d s)\n", seconds,
              kHeartbeat);
  EXPECT_LT(seconds, kHeartbeat + 10.0) << out;
}

// `trillion bench machine` across 2 hosts of 2 ranks, NICs limited to 1 Gb/s: the cluster file
// it writes has the host's ranks as its fast domain (shared memory) and the link between hosts as
// scale-out, measured at the NICs' rate (a 64 MiB ping-pong cannot beat 0.125 GB/s, and TCP gets
// most of it), and `trillion plan --cluster` reads it.
TEST(MultiHostMachine, BenchMachineMeasuresTheLinkBetweenHostsApart) {
  Hosts hosts("trm", "10.214.7", 2, 2, 1);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string file = fresh_dir("h38_machine") + ".toml";
  const auto r = run_shell(kEnv + std::string(TRILLION_BINARY) + " launch -n 4 --hostfile " +
                           hosts.hostfile() + " -- bench machine --out " + file +
                           " --size 256 --copy-mb 16 --reps 2 --json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t open = r.output.find('{'), close = r.output.rfind('}');
  ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(open, close - open + 1));
  EXPECT_EQ(j["hosts"].get<int>(), 2);
  const double inter = j["inter_host_gb_per_s"].get<double>();
  EXPECT_LE(inter, 0.125 * 1.02) << r.output;
  EXPECT_GE(inter, 0.125 * 0.5) << r.output;
  EXPECT_GT(j["mpi_gb_per_s"].get<double>(), 2 * inter) << r.output;
  EXPECT_GT(j["inter_host_latency_us"].get<double>(), 0) << r.output;
  const std::string toml = testing::slurp(file);
  EXPECT_NE(toml.find("nvlink_domain = 2\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("scaleout_source = \"measured by trillion bench machine: MPI ping-pong "
                      "between ranks on two of the job's 2 hosts"),
            std::string::npos)
      << toml;
  const auto plan =
      run_trillion("plan --model " + config_path("tiny.toml") + " --cluster " + file + " --gpus 4");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
}

}  // namespace
}  // namespace trillion
