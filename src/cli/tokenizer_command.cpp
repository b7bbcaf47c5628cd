// `trillion tokenizer`: placeholder until its issue lands; replaced by the real command.
#include "cli/commands.h"
#include "core/error.h"

namespace trillion::cli {

int tokenizer_command(int, char**) { throw Error("'trillion tokenizer' is not implemented yet"); }

}  // namespace trillion::cli
