// See config_diff.h.
#include "train/config_diff.h"

#include <fmt/format.h>

#include <sstream>

namespace trillion {

namespace {

// Flattened "section.key" -> value text, in file order. Both texts come from to_toml (one
// "[section]" header, then "key = value" lines), so a line reader is enough and this file
// stays free of the TOML library (only run_config.cpp and run_config_sections.cpp include it).
std::vector<std::pair<std::string, std::string>> flatten(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos || section.empty()) continue;
    out.emplace_back(section + "." + line.substr(0, eq), line.substr(eq + 3));
  }
  return out;
}

}  // namespace

std::vector<ConfigChange> diff_configs(const std::string& before, const std::string& after) {
  const auto a = flatten(before), b = flatten(after);
  auto find = [](const auto& list, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : list) {
      if (k == key) return &v;
    }
    return nullptr;
  };
  std::vector<ConfigChange> changes;
  for (const auto& [key, value] : b) {
    const std::string* old = find(a, key);
    if (old == nullptr || *old != value) changes.push_back({key, old ? *old : "(absent)", value});
  }
  for (const auto& [key, value] : a) {
    if (find(b, key) == nullptr) changes.push_back({key, value, "(absent)"});
  }
  return changes;
}

bool breaks_checkpoint(const std::string& key) {
  // How the model is computed may change (recompute, attention kernel and tile, RoPE base,
  // norm epsilon, init, and precision.*: every recipe checkpoints the fp32 master weights and
  // moments, the bf16 copy is rebuilt from the master and gradients are not saved, and a run
  // may finish in another recipe, as NVIDIA's NVFP4 recipe 2509.25149 ends in BF16); what its
  // tensors are may not.
  static const char* const kShape[] = {
      "model.vocab_size",       "model.d_model",          "model.n_layers",
      "model.n_heads",          "model.n_kv_heads",       "model.head_dim",
      "model.ffn_hidden",       "model.tied_embeddings",  "model.dtype",
      "model.n_dense_layers",   "model.n_routed_experts", "model.n_shared_experts",
      "model.expert_ffn",       "model.router",           "optim.name",
      "model.mtp_depth",        "model.q_lora_rank",      "model.kv_lora_rank",
      "model.qk_nope_head_dim", "model.qk_rope_head_dim", "model.v_head_dim"};
  for (const char* k : kShape) {
    if (key == k) return true;
  }
  return false;
}

std::string describe(const std::vector<ConfigChange>& changes) {
  std::string out;
  for (const ConfigChange& c : changes) {
    out += fmt::format("{}{} {} -> {}", out.empty() ? "" : ", ", c.key, c.before, c.after);
  }
  return out;
}

}  // namespace trillion
