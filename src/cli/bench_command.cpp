// `trillion bench`: placeholder.
#include "cli/commands.h"
#include "core/error.h"

namespace trillion::cli {

int bench_command(int, char**) { throw Error("'trillion bench' is not implemented yet"); }

}  // namespace trillion::cli
