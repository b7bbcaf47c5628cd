// Resolves the --checkpoint argument of generate and export: a checkpoint directory as is, or a
// run directory's newest checkpoint that verifies (or its step N), saying on stderr which corrupt
// ones were skipped. The checkpoint comes back pinned (train/checkpoint/checkpoint.h
// PinnedCheckpoint): a live run's retention does not delete it while the caller holds it, and
// one that retention removed between the listing and the pin is passed over, never called
// corrupt. Throws Error naming the argument and the fix.
#pragma once

#include <cstdint>
#include <string>

#include "train/checkpoint/checkpoint.h"

namespace trillion::cli {

// step < 0: the newest valid checkpoint.
PinnedCheckpoint resolve_checkpoint_dir(const std::string& argument, const char* command,
                                        int64_t step = -1);

}  // namespace trillion::cli

namespace trillion {
struct RunConfig;
}
namespace trillion::cli {
// The tokenizer the run's shards were prepared with, or "" (synthetic data, or none recorded).
std::string run_tokenizer_path(const RunConfig& config);
}  // namespace trillion::cli
