// How a model's units are cut into pipeline stages: the one partition the engine's StageModels
// use and the planner reads. Units are 0 (embedding), 1 + l (layer l) and L + 1 (head); stage s of
// S holds a contiguous run of them, the embedding on stage 0 and the head on stage S - 1.
//
// partition_stages(L, S) is the engine's split: layers as evenly as whole layers allow, every
// stage floor(L / S) and the first L mod S stages one more. The weighted form also counts the
// embedding and the head as `weights` layers' worth of work (Llama 3 2407.21783 §3.3.2 took a
// layer off the first and last stages for this reason): it minimises the largest stage's cost
// (layers + its weight) over contiguous whole-layer splits, then keeps the extra layers on the
// earliest stages as the even split does; with zero weights it is the even split exactly. Where
// the weights make it cheapest, the weighted form's first stage may hold the embedding alone and
// its last stage the head alone, as Llama 3 405B's 126 layers + embedding + head on 16 x 8 = 128
// stages do (§3.3.2: "the first model chunk on the first stage has only the embedding").
// Invariant: the stages cover units 0..L+1 exactly once, in order; every stage holds at least one
// layer, except such a weighed end stage; throws Error when S < 1 or S > max_stages (L for the
// even split; L + 1 per end with positive weight for the weighted one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trillion::plan {

struct StageUnits {
  int first_unit = 0, last_unit = 0;  // inclusive
};

struct StageWeights {
  double embedding = 0, head = 0;  // extra cost of stage 0 and stage S - 1, in layers
};

std::vector<StageUnits> partition_stages(int64_t n_layers, int n_stages);
// The most stages the weighted form accepts for n_layers layers.
int64_t max_stages(int64_t n_layers, const StageWeights& weights);
std::vector<StageUnits> partition_stages(int64_t n_layers, int n_stages,
                                         const StageWeights& weights);

// A user's or a search's own split (Megatron's first/last-stage layer counts, generalised): stage s
// holds counts[s] layers. Throws Error naming the values unless the counts sum to n_layers and
// every stage holds a layer, except that the first and the last stage (of several) may hold the
// embedding or the head alone.
std::vector<StageUnits> partition_from_counts(int64_t n_layers, const std::vector<int>& counts);

// "3/4/4/2" as layer counts per stage; false (out untouched) unless it is whole numbers
// separated by '/'. The callers name the setting in their own messages.
bool parse_stage_layer_counts(const std::string& text, std::vector<int>* out);

// The engine's split of n_layers over n_stages: the even split when `counts` is empty, else
// those counts (parallel.partition), which must be n_stages of them, each stage holding a layer
// (the engine has no embedding-only or head-only stage). Throws Error saying which.
std::vector<StageUnits> engine_partition(int64_t n_layers, int n_stages,
                                         const std::vector<int>& counts);

// Layers per stage of a partition, in stage order.
std::vector<int> stage_layer_counts(const std::vector<StageUnits>& stages);

}  // namespace trillion::plan
