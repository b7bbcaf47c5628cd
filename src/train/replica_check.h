// Silent-data-corruption check: data-parallel replicas hold bitwise the same parameters after
// every step (each applies the same reduced gradients with the same optimizer), so a checksum
// that differs between them is a fault: a flipped bit in memory, a bad core, a nondeterministic
// kernel. Dense tensors are compared over the dp group, routed experts over the ranks holding
// the same experts (edp). With three or more replicas the odd one out is named; with two, both
// ranks and the first tensor that differs.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "model/parameters.h"

namespace trillion {

// Collective over both groups. Returns "" when every replica agrees, else a message naming the
// rank(s) and the tensor. ZeRO-3 (sharded parameters) is refused by the config.
std::string compare_replicas(const ParameterSet& params, comm::Communicator& dense_group,
                             comm::Communicator& expert_group);

// Fault injection for tests: TRILLION_FLIP_PARAMETER_BIT="RANK:STEP" flips one bit of the first
// parameter on world rank RANK after step STEP, once per process.
bool flip_requested(int world_rank, int64_t step);
void flip_one_bit(const ParameterSet& params);

}  // namespace trillion
