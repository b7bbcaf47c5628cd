// The all-reduce algorithm a run chooses (parallel.allreduce): its names and their parser.
// Apart from algorithm_communicator.h so that config readers (and the fuzz build, which links
// only the readers) need no communicator code.
#pragma once

#include <cstdint>
#include <string_view>

namespace trillion::comm {

enum class AllReduceAlgorithm : uint8_t { mpi, ring, hierarchical };
std::string_view algorithm_name(AllReduceAlgorithm a);
// "mpi", "ring" or "hierarchical"; anything else throws Error naming `what` and the choices.
AllReduceAlgorithm parse_algorithm(std::string_view name, std::string_view what);

}  // namespace trillion::comm
