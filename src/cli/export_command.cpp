// `trillion export --checkpoint DIR [--step N] --format safetensors --out DIR [--dtype f32|bf16]`:
// writes a checkpoint as a Hugging Face LlamaForCausalLM directory (interop/hf_llama.h; an MLA
// model as DeepseekV3ForCausalLM, interop/hf_deepseek.h, its MTP modules in mtp.safetensors), with
// the run's tokenizer as tokenizer.json when it has one; `--format gguf --out FILE.gguf [--dtype
// f32|f16|bf16|q8_0]` as a llama.cpp GGUF v3 file with the tokenizer embedded (interop/gguf.h).
// Files that exist are not replaced without --overwrite.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/checkpoint_dir.h"
#include "cli/commands.h"
#include "cli/output_guard.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "interop/gguf.h"
#include "interop/hf_llama.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::cli {

int export_command(int argc, char** argv) {
  CLI::App app{"Export a checkpoint in another framework's format"};
  std::string checkpoint, format = "safetensors", tokenizer;
  interop::ExportOptions o;
  int64_t step = -1;
  bool overwrite = false;
  app.add_option("--checkpoint", checkpoint, "checkpoint directory or run directory")->required();
  app.add_option("--step", step, "the run's checkpoint of this step (default: newest valid)")
      ->check(whole_at_least(0));
  app.add_option("--format", format, "safetensors (a directory) or gguf (a file)");
  app.add_option("--out", o.out_dir, "output directory (safetensors) or FILE.gguf")->required();
  app.add_option("--dtype", o.dtype, "f32 or bf16; gguf also f16 and q8_0");
  app.add_option(
      "--tokenizer", tokenizer,
      "tokenizer JSON to convert (default: the one the run's shards were prepared with)");
  app.add_flag("--overwrite", overwrite, "replace the output files if they exist");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  if (format != "safetensors" && format != "gguf")
    throw Error(fmt::format("--format {}: expected safetensors or gguf", format));
  if (format == "gguf") {
    refuse_to_replace({o.out_dir}, overwrite);
  } else {
    std::vector<std::string> outputs;
    for (const char* file : {"model.safetensors", "mtp.safetensors", "config.json",
                             "generation_config.json", "tokenizer.json"}) {
      outputs.push_back(o.out_dir + "/" + file);
    }
    std::error_code ec;
    if (std::filesystem::exists(o.out_dir, ec) && !std::filesystem::is_directory(o.out_dir, ec)) {
      outputs.insert(outputs.begin(), o.out_dir);  // a file where the directory would go
    }
    refuse_to_replace(outputs, overwrite);
  }
  const PinnedCheckpoint pinned = resolve_checkpoint_dir(checkpoint, "export", step);
  o.checkpoint_dir = pinned.dir();  // retention leaves it while this reads it
  if (tokenizer.empty()) {
    const RunConfig cfg =
        parse_run_config(read_checkpoint_config(o.checkpoint_dir), o.checkpoint_dir, {});
    std::string why;
    tokenizer = find_run_tokenizer(cfg, o.checkpoint_dir, why);
    // Synthetic data has no tokenizer to miss; shards whose tokenizer is not found are said.
    if (tokenizer.empty() && cfg.data.source == "shards") {
      std::fprintf(stderr,
                   "trillion export: note: no tokenizer exported: %s; pass --tokenizer FILE to "
                   "include one\n",
                   why.c_str());
    }
  }
  o.tokenizer_path = tokenizer;
  if (format == "gguf") {
    const uint64_t bytes = interop::export_gguf({o.checkpoint_dir, o.out_dir, o.dtype, tokenizer});
    std::printf("exported %s -> %s (GGUF v3, %llu bytes, %s%s)\n", o.checkpoint_dir.c_str(),
                o.out_dir.c_str(), static_cast<unsigned long long>(bytes), o.dtype.c_str(),
                tokenizer.empty() ? "" : ", tokenizer embedded");
    return 0;
  }
  const uint64_t bytes = interop::export_hf_llama(o);
  const bool mtp = std::filesystem::exists(o.out_dir + "/mtp.safetensors");
  std::printf(
      "exported %s -> %s/model.safetensors%s (%llu bytes, %s), config.json, "
      "generation_config.json%s\n",
      o.checkpoint_dir.c_str(), o.out_dir.c_str(), mtp ? " + mtp.safetensors" : "",
      static_cast<unsigned long long>(bytes), o.dtype.c_str(),
      tokenizer.empty() ? "" : ", tokenizer.json");
  return 0;
}

}  // namespace trillion::cli
