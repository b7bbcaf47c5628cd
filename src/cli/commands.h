// The `trillion` subcommands. Each takes the arguments after its own name (argv[0] is the
// subcommand name), returns the process exit code and reports user errors by throwing
// trillion::Error, which main() prints as one line.
#pragma once

namespace trillion::cli {

int train_command(int argc, char** argv);
int generate_command(int argc, char** argv);
int compare_command(int argc, char** argv);
int bench_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int schedule_command(int argc, char** argv);
int tokenizer_command(int argc, char** argv);
int data_command(int argc, char** argv);
int launch_command(int argc, char** argv);
int inspect_command(int argc, char** argv);
int export_command(int argc, char** argv);
int import_command(int argc, char** argv);
int report_command(int argc, char** argv);

// The table main() dispatches on (and `launch` checks a subcommand against before starting
// ranks that would each fail on it).
struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

inline constexpr Subcommand kSubcommands[] = {
    {"train", train_command, "train a model from a TOML run config"},
    {"generate", generate_command, "sample text from a checkpoint"},
    {"compare", compare_command, "compare the losses and weights of two runs"},
    {"bench", bench_command, "measure GEMM peak, kernels and training steps"},
    {"plan", plan_command, "plan a training run: layout, memory, time, cost"},
    {"schedule", schedule_command, "generate, simulate and draw pipeline schedules"},
    {"tokenizer", tokenizer_command, "train, apply and invert a BPE tokenizer"},
    {"data", data_command, "prepare, synthesise and inspect token shards"},
    {"launch", launch_command, "run a subcommand as N MPI processes (mpirun)"},
    {"inspect", inspect_command, "show a config's parameter table, shards, stages"},
    {"export", export_command, "write a checkpoint as Hugging Face safetensors"},
    {"import", import_command, "make a checkpoint from Hugging Face safetensors"},
    {"report", report_command, "plot runs' metrics as one HTML page"},
};

}  // namespace trillion::cli
