// `trillion launch -n N [--hostfile F] [--mpirun PATH] [--program EXE] -- SUBCOMMAND ARGS...`:
// runs `trillion SUBCOMMAND ARGS...` as N MPI ranks under Open MPI's mpirun and turns what mpirun
// says into one line per failure.
//
// - Flags mpirun needs here are added for the user: --allow-run-as-root when running as root,
//   --oversubscribe when N exceeds this machine's cores and no hostfile says where slots are.
// - Ranks' output is tagged by mpirun (--tag-output) and re-emitted: rank 0's lines as they are,
//   other ranks' lines prefixed "[rank R] ". A rank's own error line ("trillion train: error: ...")
//   is held back and becomes the cause in the final report, so N ranks failing the same way print
//   one line. mpirun's own banners are never shown; they are parsed for the failed rank, its exit
//   code or signal. TRILLION_LAUNCH_VERBOSE=1 shows everything as it comes.
// - Each rank runs as `trillion launch --as-rank -- PROGRAM ...`, a wrapper that runs PROGRAM
//   as its child and reports a death by signal in one tagged line, so the failed rank is known
//   even when mpirun's own banner does not name it (it often does not under load).
// - SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to mpirun (which runs in its own
//   process group, so a terminal's Ctrl-C reaches the job once, through us); the first three
//   travel as SIGUSR2 and reach each rank's program as SIGTERM (cli/job_runner.h, SignalRoute).
// - --hostfile F: mpirun places ranks by F's slots. When F.mca exists (scripts/hosts.sh writes
//   it: "key value" per line, e.g. the rsh agent and the TCP interfaces), each line is passed as
//   `--mca key value`. Ranks get TRILLION_HOSTFILE (absolute), where the mesh reads sites.
// - --elastic (with --hostfile, --max-restarts): a failed host is left out of the restart, which
//   runs the largest layout the other hosts hold (cli/supervisor.h).
// - Inside a job that a launcher already started (srun, mpirun by hand: the MPI environment
//   variables are set), the subcommand is exec'd in place, after checking -n against the job size.
// - --max-restarts, --heartbeat-timeout and the fault drills (--fail-at, --hang-at,
//   --corrupt-checkpoint) hand the job to the supervisor (cli/supervisor.h); the job itself runs
//   in cli/job_runner.h. Without --heartbeat-timeout a `train` job still has a watchdog for
//   ranks stopped by a signal (--stopped-timeout, 300 s by default): the others would spin in
//   MPI forever.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/job_runner.h"
#include "cli/supervisor.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "data/file_io.h"
#include "train/run_config.h"

namespace trillion::cli {

namespace {

struct LaunchArgs {
  int processes = 0;
  std::string hostfile;
  std::string mpirun = "mpirun";
  std::string program;  // empty: this trillion binary
  std::vector<std::string> command;
  SupervisorOptions supervisor;  // processes and command are filled in by parse_args
  bool elastic = false;
};

constexpr const char* kUsage =
    "usage: trillion launch -n N [--hostfile FILE] [--mpirun PATH] [--program EXE]\n"
    "       [--max-restarts K] [--heartbeat-timeout SECONDS] [--startup-timeout SECONDS]\n"
    "       [--elastic (with --hostfile and --max-restarts: restart without a failed host)]\n"
    "       [--stopped-timeout SECONDS (default 300; 0: off)]\n"
    "       [--fail-at STEP:RANK]"
    " [--hang-at STEP:RANK] [--corrupt-checkpoint STEP] -- SUBCOMMAND [ARGS...]\n"
    "  e.g. trillion launch -n 4 -- train configs/tiny.toml --run-dir runs/dp4 --set "
    "parallel.dp=4\n";

LaunchArgs parse_args(int argc, char** argv) {
  LaunchArgs a;
  int i = 1;
  auto value = [&](const char* flag) -> std::string {
    if (i + 1 >= argc) throw Error(fmt::format("{} needs a value\n{}", flag, kUsage));
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-n" || arg == "--np" || arg == "-np") {
      const std::string v = value("-n");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 1 || n > 1 << 20) {
        throw Error(fmt::format("-n {} is not a process count; give a whole number >= 1", v));
      }
      a.processes = static_cast<int>(n);
    } else if (arg == "--hostfile") {
      a.hostfile = value("--hostfile");
    } else if (arg == "--elastic") {
      a.elastic = true;
    } else if (arg == "--mpirun") {
      a.mpirun = value("--mpirun");
    } else if (arg == "--program") {
      a.program = value("--program");
    } else if (arg == "--max-restarts") {
      const std::string v = value("--max-restarts");
      char* end = nullptr;
      const long k = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || k < 0 || k > 1000) {
        throw Error(fmt::format("--max-restarts {}: give a whole number in [0, 1000]", v));
      }
      a.supervisor.max_restarts = static_cast<int>(k);
    } else if (arg == "--stopped-timeout") {
      const std::string v = value("--stopped-timeout");
      char* end = nullptr;
      const double t = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(t == 0 || (t >= 1 && t <= 86400))) {
        throw Error(fmt::format("--stopped-timeout {}: give seconds in [1, 86400], or 0 for none",
                                v));
      }
      a.supervisor.stopped_timeout = t;
    } else if (arg == "--heartbeat-timeout" || arg == "--startup-timeout") {
      const std::string v = value(arg.c_str());
      char* end = nullptr;
      const double t = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(t >= 1 && t <= 86400)) {
        throw Error(fmt::format("{} {}: give seconds in [1, 86400]", arg, v));
      }
      (arg == "--heartbeat-timeout" ? a.supervisor.heartbeat_timeout
                                    : a.supervisor.startup_timeout) = t;
    } else if (arg == "--fail-at" || arg == "--hang-at") {
      const std::string v = value(arg.c_str());
      long long step = 0;
      int rank = -1;
      char tail = 0;
      if (std::sscanf(v.c_str(), "%lld:%d%c", &step, &rank, &tail) != 2 || step < 0 || rank < 0) {
        throw Error(fmt::format(
            "{} {}: expected STEP:RANK, e.g. 5:1 (after step 5, rank 1; step 0: during start-up)",
            arg, v));
      }
      a.supervisor.faults.push_back(
          fmt::format("{}:{}:{}", arg == "--fail-at" ? "kill" : "hang", step, rank));
    } else if (arg == "--corrupt-checkpoint") {
      const std::string v = value("--corrupt-checkpoint");
      char* end = nullptr;
      const long long step = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || step < 1) {
        throw Error(fmt::format("--corrupt-checkpoint {}: give the step of a checkpoint", v));
      }
      a.supervisor.faults.push_back(fmt::format("corrupt:{}", step));
    } else {
      throw Error(fmt::format("unknown launch option '{}'; put the subcommand after '--'\n{}", arg,
                              kUsage));
    }
  }
  for (; i < argc; ++i) a.command.push_back(argv[i]);
  if (a.processes == 0) throw Error(std::string("missing -n N (number of processes)\n") + kUsage);
  if (a.command.empty()) {
    throw Error(std::string("missing the subcommand to run after '--'\n") + kUsage);
  }
  for (const std::string& fault : a.supervisor.faults) {  // kind:STEP:RANK, or corrupt:STEP
    const size_t last = fault.rfind(':');
    if (fault.rfind("corrupt:", 0) == 0 || last == std::string::npos) continue;
    const int rank = std::stoi(fault.substr(last + 1));
    if (rank >= a.processes) {
      throw Error(fmt::format(
          "--{}-at {}: rank {} is not one of the job's {} ranks (0..{}), so it would never fire",
          fault.rfind("kill", 0) == 0 ? "fail" : "hang",
          fault.substr(fault.find(':') + 1), rank, a.processes, a.processes - 1));
    }
  }
  if (a.program.empty() &&
      std::none_of(std::begin(kSubcommands), std::end(kSubcommands),
                   [&](const Subcommand& s) { return a.command[0] == s.name; })) {
    std::string names;
    for (const Subcommand& s : kSubcommands) {
      names += (names.empty() ? "" : ", ") + std::string(s.name);
    }
    throw Error(fmt::format("'{}' is not a trillion command (the commands: {}); nothing was "
                            "started",
                            a.command[0], names));
  }
  if (a.supervisor.startup_timeout > 0 && a.supervisor.heartbeat_timeout == 0) {
    throw Error(fmt::format(
        "--startup-timeout {} needs the watchdog: add --heartbeat-timeout SECONDS (the limit "
        "between steps once training has begun)",
        a.supervisor.startup_timeout));
  }
  if (a.elastic && (a.hostfile.empty() || a.supervisor.max_restarts == 0 ||
                    a.command[0] != "train" || a.command.size() < 2)) {
    throw Error(
        "--elastic restarts a `train CONFIG ... --run-dir DIR` job on the hosts a failure "
        "leaves: give it --hostfile FILE and --max-restarts K");
  }
  if (!a.hostfile.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(a.hostfile, ec) || ::access(a.hostfile.c_str(), R_OK)) {
      throw Error(
          fmt::format("--hostfile {}: not a readable file (one line per machine: 'host "
                      "slots=K')",
                      a.hostfile));
    }
  }
  return a;
}

// --elastic's view of the run: its data-parallel layout and batch, from the train command's
// config and --set overrides (read as train reads them).
ElasticOptions elastic_options(const LaunchArgs& a) {
  std::vector<std::string> overrides;
  for (size_t i = 2; i < a.command.size(); ++i) {
    if (a.command[i] == "--set" && i + 1 < a.command.size()) overrides.push_back(a.command[++i]);
    if (a.command[i].starts_with("--set=")) overrides.push_back(a.command[i].substr(6));
  }
  const RunConfig c = load_run_config(a.command[1], overrides);
  ElasticOptions e;
  e.enabled = true;
  e.replica_ranks = static_cast<int>(c.parallel.pp * c.parallel.cp * c.parallel.tp);
  e.dp = static_cast<int>(c.parallel.dp);
  e.micro_batch = c.train.micro_batch;
  e.grad_accum = c.train.grad_accum;
  return e;
}

std::string self_path() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the trillion binary via /proc/self/exe: " + ec.message());
  return p.string();
}

std::optional<std::string> find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

// "key value" lines of an MCA sidecar file ("#" comments); none when the file does not exist.
std::vector<std::pair<std::string, std::string>> hostfile_mca(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> settings;
  std::ifstream in(path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    const size_t space = line.find_first_of(" \t", start);
    const size_t value = space == std::string::npos ? space : line.find_first_not_of(" \t", space);
    if (value == std::string::npos) {
      throw Error(fmt::format("{} line {}: '{}' is not 'key value' (an Open MPI MCA setting)",
                              path, number, line));
    }
    const size_t end = line.find_last_not_of(" \t\r");
    settings.emplace_back(line.substr(start, space - start), line.substr(value, end + 1 - value));
  }
  return settings;
}

[[noreturn]] void exec_or_throw(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  throw Error(fmt::format("cannot run {}: {}", args[0], std::strerror(errno)));
}

}  // namespace

// The rank side: `trillion launch --as-rank -- PROGRAM ARGS...`, what mpirun starts on every
// rank. Runs PROGRAM as a child (it inherits the MPI environment and initialises MPI itself),
// forwards signals to it, and when a signal kills it says so in one tagged line, because mpirun
// does not always report which rank died.
int run_as_rank(int argc, char** argv) {
  const comm::LaunchEnvironment env = comm::launch_environment();
  std::vector<std::string> program(argv + 3, argv + argc);
  if (program.empty()) throw Error("--as-rank needs a program after '--'");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Its own process group, so mpirun's signals to the wrapper's group reach the program only
    // through the wrapper (and SIGUSR2 as SIGTERM); it dies with the wrapper, never orphaned.
    const pid_t wrapper = ::getppid();
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != wrapper) ::_exit(137);
    std::vector<char*> cargv;
    for (const std::string& a : program) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    std::fprintf(stderr, "trillion launch: rank %d cannot run %s: %s\n", env.rank, cargv[0],
                 std::strerror(errno));
    ::_exit(127);
  }
  forward_signals_to(pid, SignalRoute::to_rank_program);
  const int status = wait_for(pid);
  if (WIFSIGNALED(status)) {
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
    std::fprintf(stderr, "trillion launch: rank %d was killed by signal %d (%s) on %s\n", env.rank,
                 WTERMSIG(status), strsignal(WTERMSIG(status)), host);
    return 128 + WTERMSIG(status);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int launch_command(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--as-rank") == 0 && std::strcmp(argv[2], "--") == 0) {
    return run_as_rank(argc, argv);
  }
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  const LaunchArgs args = parse_args(argc, argv);
  std::vector<std::string> program = {args.program.empty() ? self_path() : args.program};
  program.insert(program.end(), args.command.begin(), args.command.end());

  // Already one rank of a job (srun, or mpirun started by hand): become the subcommand.
  const comm::LaunchEnvironment env = comm::launch_environment();
  if (env.found) {
    if (env.size > 0 && env.size != args.processes) {
      throw Error(
          fmt::format("-n {} but this job already has {} processes ({}); use -n {} or "
                      "start the job with {} processes",
                      args.processes, env.size, env.source, env.size, args.processes));
    }
    exec_or_throw(program);
  }

  const auto mpirun = find_on_path(args.mpirun);
  if (!mpirun) {
    throw Error(
        fmt::format("'{}' not found; install Open MPI (openmpi-bin, see scripts/setup.sh) "
                    "or pass --mpirun PATH",
                    args.mpirun));
  }
  // The mpirun command line for a hostfile (absolute, or empty) and a process count; --elastic
  // builds it again for the hosts left after a failure.
  const std::string mpirun_path = *mpirun;
  auto mpirun_command = [mpirun_path, program](const std::string& hostfile, int processes) {
    std::vector<std::string> cmd = {mpirun_path, "--tag-output", "-n", std::to_string(processes)};
    if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    if (hostfile.empty() && static_cast<unsigned>(processes) > cores) {
      cmd.push_back("--oversubscribe");
    }
    if (!hostfile.empty()) {
      cmd.insert(cmd.end(), {"--hostfile", hostfile});
      for (const auto& [key, value] : hostfile_mca(hostfile + ".mca")) {
        cmd.insert(cmd.end(), {"--mca", key, value});
      }
      ::setenv("TRILLION_HOSTFILE", hostfile.c_str(), 1);
      cmd.insert(cmd.end(), {"-x", "TRILLION_HOSTFILE"});
    }
    // Forward the thread settings to ranks on other machines (local ranks inherit everything).
    for (const char* var : {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS"}) {
      if (std::getenv(var) != nullptr) cmd.insert(cmd.end(), {"-x", var});
    }
    // Every rank runs through this binary's rank wrapper (run_as_rank below).
    for (const std::string& w :
         {self_path(), std::string("launch"), std::string("--as-rank"), std::string("--")}) {
      cmd.push_back(w);
    }
    cmd.insert(cmd.end(), program.begin(), program.end());
    return cmd;
  };
  const std::string hostfile =
      args.hostfile.empty() ? std::string() : std::filesystem::absolute(args.hostfile).string();
  const std::vector<std::string> cmd = mpirun_command(hostfile, args.processes);

  const char* verbose_env = std::getenv("TRILLION_LAUNCH_VERBOSE");
  const bool verbose = verbose_env != nullptr && std::strcmp(verbose_env, "0") != 0;
  if (verbose) {
    std::string line;
    for (const std::string& s : cmd) line += s + " ";
    std::fprintf(stderr, "trillion launch: %s\n", line.c_str());
  }

  SupervisorOptions supervisor = args.supervisor;
  supervisor.processes = args.processes;
  supervisor.command = args.command;
  supervisor.hostfile = hostfile;
  if (args.elastic) {
    supervisor.elastic = elastic_options(args);
    supervisor.elastic.command = mpirun_command;
  }
  return supervise(supervisor, cmd, verbose);
}

}  // namespace trillion::cli
