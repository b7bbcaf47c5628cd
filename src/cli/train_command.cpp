// `trillion train CONFIG.toml --run-dir DIR [--set section.key=value ...] [--resume]`.
// SIGINT, SIGTERM, SIGUSR1, SIGUSR2 and SIGHUP ask the trainer to finish the current step,
// checkpoint and stop cleanly.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <filesystem>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "comm/mpi_communicator.h"
#include "train/fault_drill.h"
#include "train/trainer.h"

namespace trillion::cli {

namespace {
extern "C" void request_stop(int) {
  g_stop_requested.store(true);
}
}  // namespace

int train_command(int argc, char** argv) {
  CLI::App app{"Train a model from a TOML run config"};
  std::string config_path;
  std::vector<std::string> overrides;
  TrainOptions opt;
  app.add_option("config", config_path, "run config (TOML)")->required()->check(CLI::ExistingFile);
  app.add_option("--run-dir", opt.run_dir, "run directory (created if missing)")->required();
  app.add_option("--set", overrides, "override a config key: section.key=value (repeatable)");
  app.add_flag("--resume", opt.resume, "continue from the newest valid checkpoint in --run-dir");
  app.add_option("--stop-after", opt.stop_after_step,
                 "checkpoint and stop once this step completes (resume later with --resume)")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  app.add_option("--max-minutes", opt.max_minutes,
                 "checkpoint and stop when this much wall time is spent")
      ->check(finite_positive());
  app.add_flag("--quiet", opt.quiet, "no progress output");
  app.add_flag("--allow-oversubscribe-memory", opt.allow_oversubscribe_memory,
               "start even when the run's memory plan exceeds the memory available");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  std::error_code ec;
  if (opt.run_dir.empty()) throw Error("--run-dir is empty; name the run directory");
  if (std::filesystem::exists(opt.run_dir, ec) && !std::filesystem::is_directory(opt.run_dir, ec)) {
    throw Error(fmt::format("--run-dir '{}' exists and is not a directory; choose another path",
                            opt.run_dir));
  }
  const RunConfig config = load_run_config(config_path, overrides);
  check_fault_injection(comm::launch_environment().size);
  // SIGUSR1, SIGUSR2 and SIGHUP are the usual scheduler warnings before a preemption (Slurm's
  // --signal, Kubernetes): checkpoint and stop, as for SIGTERM.
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) std::signal(sig, request_stop);
  // A closed output pipe (`trillion train ... | head`) must not kill the run: writes then fail
  // with EPIPE, and RunDirectory::console notes it once and goes quiet.
  std::signal(SIGPIPE, SIG_IGN);
  train(config, opt);
  return 0;
}

}  // namespace trillion::cli
