// The rules between a run config's sections, in one list: each names the keys it relates and
// throws Error naming the values and the fix when they do not fit together. Invariants: they run
// after every section was read and checked on its own (run_config_sections.h), so a rule may rely
// on each section's values being valid; they run in list order and the first broken rule is the
// one reported; none changes the config (resolve_across_sections does, after all passed).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "train/run_config.h"

namespace trillion {

struct CrossSectionCheck {
  std::vector<std::string_view> keys;  // "section.key", every key the rule reads
  void (*check)(const RunConfig& config, const std::string& source);
};

// Every rule between sections, in the order they are checked.
const std::vector<CrossSectionCheck>& cross_section_checks();

// Runs every rule of cross_section_checks() in order; `source` names the file in messages.
void check_across_sections(const RunConfig& config, const std::string& source);

// The values one section takes from another once every rule passed: data.vocab = 0 becomes
// model.vocab_size, and precision.bf16_blocks is written as "first:N,last:M" for model.n_layers.
void resolve_across_sections(RunConfig& config);

}  // namespace trillion
