// See algorithm_kind.h.
#include "comm/algorithms/algorithm_kind.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion::comm {

std::string_view algorithm_name(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::mpi:
      return "mpi";
    case AllReduceAlgorithm::ring:
      return "ring";
    case AllReduceAlgorithm::hierarchical:
      return "hierarchical";
  }
  return "?";
}

AllReduceAlgorithm parse_algorithm(std::string_view name, std::string_view what) {
  for (auto a :
       {AllReduceAlgorithm::mpi, AllReduceAlgorithm::ring, AllReduceAlgorithm::hierarchical}) {
    if (name == algorithm_name(a)) return a;
  }
  throw Error(
      fmt::format("{} = \"{}\" is not an all-reduce algorithm; use \"mpi\" (the MPI "
                  "library's), \"ring\" or \"hierarchical\"",
                  what, name));
}

}  // namespace trillion::comm
