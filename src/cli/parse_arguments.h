// Command-line parsing shared by the subcommands: CLI11 prints the usage problem (or --help);
// a usage error exits 2 like every other user error, --help exits 0.
#pragma once

#include <CLI/CLI.hpp>

namespace trillion::cli {

// Returns -1 when the command should run, else the exit code to return.
inline int parse_arguments(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

}  // namespace trillion::cli
