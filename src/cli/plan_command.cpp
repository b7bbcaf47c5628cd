// `trillion plan`: placeholder until its issue lands; replaced by the real command.
#include "cli/commands.h"
#include "core/error.h"

namespace trillion::cli {

int plan_command(int, char**) { throw Error("'trillion plan' is not implemented yet"); }

}  // namespace trillion::cli
