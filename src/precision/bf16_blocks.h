// Which transformer blocks keep their linear layers in bf16 under a low-precision recipe: the
// FP4 recipes' last safeguard. NVIDIA's NVFP4 pre-training report (2509.25149 §4.1) finds that
// training diverges when every linear layer is FP4 and that the final blocks are the cause ("they
// require more dynamic range and mantissa than FP4 provides"; appendix E.2: their Wgrad outputs
// carry the largest quantisation errors, and keeping only first blocks does not help). Its 12B
// model keeps the first 2 and last 8 of its 62 blocks in BF16 (16% of the linear layers,
// appendix A.1); its MXFP4-vs-NVFP4 comparison keeps the last 8 of 52 (about 15%, §5 and
// appendix A.2).
//
// A recipe states its rule as those counts out of a reference depth (Bf16BlockRule); a model of
// L blocks keeps round(first * L / of) first blocks and round(last * L / of) last ones (halves
// round up), so L = 62 under nvfp4 is the paper's model exactly and a shallow model keeps about
// the same share or none (L <= 3: one block would be a third of the linear layers or more).
// [precision] bf16_blocks = "first:N,last:M" overrides the counts (parse_bf16_blocks).
// Layers are the model's GLOBAL indices 0..L-1, so every pipeline stage keeps the blocks one
// process keeps.
#pragma once

#include <cstdint>
#include <string>

namespace trillion::precision {

// First and last blocks kept in bf16, as counts out of a reference model of `of` blocks
// (of = 0: none).
struct Bf16BlockRule {
  int64_t first = 0, last = 0, of = 0;
};

// The blocks of one model kept in bf16: its first `first` and last `last` (0-based, global).
struct Bf16Blocks {
  int64_t first = 0, last = 0;
  bool none() const { return first == 0 && last == 0; }
  bool operator==(const Bf16Blocks&) const = default;
};

// The rule scaled to a model of n_layers blocks (round half up of count * n_layers / of).
Bf16Blocks bf16_blocks_for(const Bf16BlockRule& rule, int64_t n_layers);

// "first:N,last:M" (either part alone, the other 0; any order), or "none". Throws Error with a
// message naming the text and the accepted forms.
Bf16Blocks parse_bf16_blocks(const std::string& text);
std::string bf16_blocks_text(const Bf16Blocks& b);  // "first:N,last:M"

// Whether global layer `layer` of a model of n_layers blocks is kept in bf16 (false for
// layer < 0: a GEMM outside the model's blocks, as unit tests call it).
bool in_bf16_blocks(const Bf16Blocks& b, int64_t layer, int64_t n_layers);

// "blocks 0-1 and 54-61 (10 of 62)", "none of 2 blocks": for logs and bench output.
std::string describe_bf16_blocks(const Bf16Blocks& b, int64_t n_layers);

}  // namespace trillion::precision
