// Entry point of the `trillion` command: dispatches to a subcommand and turns a user error into
// one line on stderr with exit code 2 (internal errors exit 3). SIGXFSZ is ignored, so a write
// past the file size limit (`ulimit -f`) fails with EFBIG and is reported with its path, instead
// of the kernel killing the process without a word. Failures that are the environment's, not the
// program's (out of memory, a filesystem refusing an operation), are user errors too: each gets
// one line that names what ran out or which path failed.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string_view>

#include "cli/commands.h"
#include "core/error.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Subcommand kSubcommands[] = {
    {"train", trillion::cli::train_command, "train a model from a TOML run config"},
    {"generate", trillion::cli::generate_command, "sample text from a checkpoint"},
    {"compare", trillion::cli::compare_command, "compare the losses and weights of two runs"},
    {"bench", trillion::cli::bench_command, "measure GEMM peak, kernels and training steps"},
    {"plan", trillion::cli::plan_command, "plan a training run: layout, memory, time, cost"},
    {"schedule", trillion::cli::schedule_command, "generate, simulate and draw pipeline schedules"},
    {"tokenizer", trillion::cli::tokenizer_command, "train, apply and invert a BPE tokenizer"},
    {"data", trillion::cli::data_command, "prepare, synthesise and inspect token shards"},
    {"launch", trillion::cli::launch_command, "run a subcommand as N MPI processes (mpirun)"},
    {"inspect", trillion::cli::inspect_command, "show a config's parameter table, shards, stages"},
    {"export", trillion::cli::export_command, "write a checkpoint as Hugging Face safetensors"},
    {"import", trillion::cli::import_command, "make a checkpoint from Hugging Face safetensors"},
    {"report", trillion::cli::report_command, "plot runs' metrics as one HTML page"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: trillion <command> [args...]\n\ncommands:\n");
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
  std::fprintf(out, "\nRun 'trillion <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string_view name = argv[1];
  for (const Subcommand& s : kSubcommands) {
    if (name != s.name) continue;
    try {
      return s.run(argc - 1, argv + 1);
    } catch (const trillion::Error& e) {
      std::fprintf(stderr, "trillion %s: error: %s\n", s.name, e.what());
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr,
                   "trillion %s: error: out of memory; the run needs more memory than this "
                   "machine could give (use a smaller model, batch or sequence length)\n",
                   s.name);
      return 2;
    } catch (const std::filesystem::filesystem_error& e) {
      std::fprintf(stderr, "trillion %s: error: %s (path '%s')\n", s.name,
                   e.code().message().c_str(), e.path1().string().c_str());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trillion %s: internal error: %s\n", s.name, e.what());
      return 3;
    }
  }
  std::fprintf(stderr, "trillion: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
