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
// The tokenizer the run's shards were prepared with (checkpoint `dir`), or "" with `why` saying
// what was looked for and where. data.path and the shards' tokenizer are recorded relative to
// where training ran: each is tried as given, then under the run directory and each directory
// above it, so a reader run from elsewhere finds them.
std::string find_run_tokenizer(const RunConfig& config, const std::string& dir, std::string& why);
}  // namespace trillion::cli
