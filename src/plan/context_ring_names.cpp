// The parallel.cp_mla key's names (plan/context_ring.h), apart from the ring's cost model so the
// config readers' fuzz build (tests/fuzz/CMakeLists.txt) links them alone.
#include <fmt/format.h>

#include "core/error.h"
#include "plan/context_ring.h"

namespace trillion::plan {

CpMla parse_cp_mla(const std::string& name, const std::string& field) {
  if (name == "auto") return CpMla::automatic;
  if (name == "heads") return CpMla::heads;
  if (name == "latent") return CpMla::latent;
  throw Error(fmt::format("{} = \"{}\": expected \"auto\", \"heads\" or \"latent\"", field, name));
}

const char* cp_mla_name(CpMla choice) {
  switch (choice) {
    case CpMla::heads:
      return "heads";
    case CpMla::latent:
      return "latent";
    default:
      return "auto";
  }
}

}  // namespace trillion::plan
