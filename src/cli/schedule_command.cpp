// `trillion schedule`: placeholder until its issue lands; replaced by the real command.
#include "cli/commands.h"
#include "core/error.h"

namespace trillion::cli {

int schedule_command(int, char**) { throw Error("'trillion schedule' is not implemented yet"); }

}  // namespace trillion::cli
