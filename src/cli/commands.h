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

}  // namespace trillion::cli
