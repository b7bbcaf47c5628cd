// The readers of a run config's sections: one per [section] (model, train, optim, data, parallel,
// emulate, guard, checkpoint, precision, diloco), each reading its own keys into RunConfig and
// checking each value on its own. Invariants: a reader touches only its section's keys (and,
// for [checkpoint], their old names in [train]); an unknown section or key is an Error naming it;
// a rule that relates keys of two sections is not here but in run_config_checks.h's one list.
// Brings toml++ (heavy to compile): included only by run_config.cpp and run_config_sections.cpp
// (the [model] reader is run_config_model_section.cpp, through train/section_reader.h).
#pragma once

#include <toml++/toml.h>

#include <string>

#include "train/run_config.h"

namespace trillion {

// Reads every section of `root` (a parsed config with its --set overrides applied) into
// `config`, in the order listed above; the first bad value throws Error naming `source`, the key
// and the fix.
void read_sections(const toml::table& root, const std::string& source, RunConfig& config);

}  // namespace trillion
