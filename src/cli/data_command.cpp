// `trillion data`: placeholder until its issue lands; replaced by the real command.
#include "cli/commands.h"
#include "core/error.h"

namespace trillion::cli {

int data_command(int, char**) { throw Error("'trillion data' is not implemented yet"); }

}  // namespace trillion::cli
