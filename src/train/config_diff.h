// What changed between the resolved config a run directory was last trained with and the one a
// `--resume` brings: every key whose value differs, so the change is said and logged, and the
// keys a checkpoint cannot survive (the model's shape and its tensors' dtype, the vocabulary)
// are refused before anything is touched.
#pragma once

#include <string>
#include <vector>

namespace trillion {

struct ConfigChange {
  std::string key;            // "optim.lr"
  std::string before, after;  // TOML text of the values ("(absent)" when missing)
};

// Both arguments are resolved configs as TOML text (to_toml). Keys in file order of `after`,
// then keys only `before` has.
std::vector<ConfigChange> diff_configs(const std::string& before, const std::string& after);

// Whether a checkpoint written under the old value cannot be loaded under the new one.
bool breaks_checkpoint(const std::string& key);

// "optim.lr 0.003 -> 1e+30, train.steps 20 -> 40"
std::string describe(const std::vector<ConfigChange>& changes);

}  // namespace trillion
