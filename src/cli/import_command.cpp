// `trillion import --format safetensors DIR --out RUN_DIR [--config BASE.toml]`: turns a Hugging
// Face Llama directory (config.json + model.safetensors) into RUN_DIR/checkpoints/step_00000000,
// which `trillion generate` reads and `trillion train --resume` continues from. The run's
// [train]/[data]/[optim] come from --config (default: built-in defaults on random tokens); its
// [model] always from config.json. A tensor the model has no place for is refused by name unless
// --allow-unknown, which leaves it out and names it on stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/output_guard.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "interop/hf_llama.h"

namespace trillion::cli {

int import_command(int argc, char** argv) {
  CLI::App app{"Make a trillion checkpoint from another framework's files"};
  std::string format = "safetensors", in_dir, run_dir, config;
  app.add_option("DIR", in_dir, "directory with config.json and model.safetensors")->required();
  app.add_option("--format", format, "safetensors");
  app.add_option("--out", run_dir, "run directory to create the checkpoint in")->required();
  app.add_option("--config", config, "run config whose non-model sections the run uses");
  bool allow_unknown = false;
  app.add_flag("--allow-unknown", allow_unknown,
               "leave out tensors the model has no place for (default: refuse, naming them)");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  if (format != "safetensors")
    throw Error(fmt::format("--format {}: only safetensors imports", format));
  require_new_directory(run_dir, "--out");
  // A placeholder [model] (replaced by config.json's) so the defaults parse on their own.
  std::string base =
      "[model]\nvocab_size = 2\nd_model = 8\nn_layers = 1\nn_heads = 1\nffn_hidden = 8\n"
      "seq_len = 8\n[data]\nsource = \"random\"\n",
              origin = "built-in import defaults";
  if (!config.empty()) {
    std::ifstream in(config);
    if (!in) throw Error(fmt::format("cannot read --config '{}'", config));
    std::stringstream ss;
    ss << in.rdbuf();
    base = ss.str();
    origin = config;
  }
  std::vector<std::string> unknown;
  const std::string dir =
      interop::import_hf_llama(in_dir, run_dir, base, origin, allow_unknown, &unknown);
  for (const std::string& name : unknown)
    std::fprintf(stderr, "import: left out tensor '%s' (--allow-unknown)\n", name.c_str());
  std::printf("imported %s -> %s\n", in_dir.c_str(), dir.c_str());
  return 0;
}

}  // namespace trillion::cli
