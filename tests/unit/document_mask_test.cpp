// Document masking in packed sequences (data.document_mask, docs/data.md): a packed sequence of
// three documents, attention kept inside each and the cross-boundary prediction left out of the
// loss, equals in f64 the same documents run one per sequence with the padding masked out —
// summed loss and every parameter's gradient — for tiled and materialised attention, with and
// without RoPE positions restarting per document. The tiled kernels skip (and count) the tiles
// that lie wholly before their queries' documents.
#include <gtest/gtest.h>

#include "data/loader.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace trillion;

namespace {

constexpr int32_t kEnd = 18;  // the document-end token (the last vocabulary id)

ModelConfig packed_config(bool tiled) {
  ModelConfig c;
  c.vocab_size = 19;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.seq_len = 16;
  c.init_std = 0.2;
  c.dtype = DType::f64;
  c.tiled_attention = tiled;
  c.attention_block = 4;  // tiles of 4: the third document's queries skip whole key tiles
  return c;
}

// Three documents of 5, 7 and 4 tokens, each ending with kEnd: 16 tokens.
std::vector<std::vector<int32_t>> documents() {
  Philox rng(11, "documents");
  std::vector<std::vector<int32_t>> docs;
  int64_t k = 0;
  for (int len : {5, 7, 4}) {
    std::vector<int32_t> d(len);
    for (int i = 0; i + 1 < len; ++i) d[i] = static_cast<int32_t>(rng.below(k++, kEnd));
    d[len - 1] = kEnd;
    docs.push_back(d);
  }
  return docs;
}

struct Result {
  double loss_sum = 0;
  std::vector<double> grads;
  AttentionTileFlops tiles;
};

Result gradients(Transformer& m, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& targets) {
  m.init_parameters(5);
  m.zero_grad();
  const double mean = m.forward(tokens.data(), targets.data());
  m.backward(1.0);  // the gradient of the summed loss
  Result r;
  r.loss_sum = mean * static_cast<double>(tokens.size());
  const auto* g = static_cast<const double*>(m.gradients().raw());
  r.grads.assign(g, g + m.table().total_elements());
  r.tiles = m.backend().attention_tile_flops();
  return r;
}

// One packed [1, 16] sequence: document starts from the loader's rule, the loss masked at every
// document end (data.mask_boundary_loss).
Result packed(bool tiled, bool restart) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  std::vector<int32_t> tokens;
  for (const auto& d : documents()) tokens.insert(tokens.end(), d.begin(), d.end());
  std::vector<int32_t> targets(tokens.begin() + 1, tokens.end()), starts(tokens.size());
  targets.push_back(0);
  data::mask_boundary_targets(tokens.data(), static_cast<int64_t>(tokens.size()), kEnd,
                              targets.data());
  data::document_starts(tokens.data(), static_cast<int64_t>(tokens.size()), kEnd, starts.data());
  Transformer m(packed_config(tiled), {1, 16}, *be, tracker, false, {}, restart);
  m.set_documents(starts.data());
  return gradients(m, tokens, targets);
}

// The same documents one per [3, 7] row, padding (token 0) and each document's last prediction
// ignored, plain causal attention.
Result padded(bool tiled) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const int64_t T = 7;
  std::vector<int32_t> tokens(3 * T, 0), targets(3 * T, data::kNoTarget);
  const auto docs = documents();
  for (int64_t b = 0; b < 3; ++b) {
    const auto& d = docs[b];
    for (size_t i = 0; i < d.size(); ++i) tokens[b * T + i] = d[i];
    for (size_t i = 0; i + 1 < d.size(); ++i) targets[b * T + i] = d[i + 1];
  }
  ModelConfig c = packed_config(tiled);
  Transformer m(c, {3, T}, *be, tracker);
  return gradients(m, tokens, targets);
}

}  // namespace

TEST(DocumentStarts, FollowTheEndTokens) {
  const std::vector<int32_t> tokens{3, 18, 4, 5, 18, 18, 7};
  std::vector<int32_t> starts(tokens.size()), targets{18, 4, 5, 18, 18, 7, 1};
  data::document_starts(tokens.data(), 7, 18, starts.data());
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0, 2, 2, 2, 5, 6}));
  data::mask_boundary_targets(tokens.data(), 7, 18, targets.data());
  EXPECT_EQ(targets, (std::vector<int32_t>{18, -1, 5, 18, -1, -1, 1}));
}

class PackedDocuments : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(PackedDocuments, EqualOneDocumentPerSequenceInF64) {
  const auto [tiled, restart] = GetParam();
  const Result p = packed(tiled, restart), r = padded(tiled);
  EXPECT_NEAR(p.loss_sum, r.loss_sum, 1e-6 * std::abs(r.loss_sum));
  ASSERT_EQ(p.grads.size(), r.grads.size());
  double worst = 0, norm = 0;
  for (size_t i = 0; i < p.grads.size(); ++i) {
    worst = std::max(worst, std::abs(p.grads[i] - r.grads[i]));
    norm = std::max(norm, std::abs(r.grads[i]));
  }
  EXPECT_GT(norm, 1e-3);  // the gradients are not trivially zero
  EXPECT_LT(worst, 1e-6) << "largest gradient " << norm;
  std::printf(
      "[packed vs padded, %s, rope %s] |loss sum diff| %.2e, max |grad diff| %.2e "
      "(largest gradient %.2e)\n",
      tiled ? "tiled" : "materialised", restart ? "restarting" : "global",
      std::abs(p.loss_sum - r.loss_sum), worst, norm);
  if (tiled) {
    // Tiles of 4 over 16 positions, documents [0,5) [5,12) [12,16): the query tile [12,16) skips
    // key tiles [0,4) [4,8) and [8,12) wholly before position 12; the tile [8,12) skips [0,4).
    // Per layer and head: 4 skipped 4x4 tiles of 4 HD FLOPs per score.
    const double per_tile = 4.0 * 4 * 4 * 4;                        // 4 HD x 16 scores, HD = 4
    EXPECT_DOUBLE_EQ(p.tiles.skipped_flops, 2 * 4 * 4 * per_tile);  // 2 layers x 4 heads
    // Causal tiles on or below the diagonal: 10 of them, 6 computed.
    EXPECT_DOUBLE_EQ(p.tiles.computed_flops, 2 * 4 * 6 * per_tile);
  }
}

INSTANTIATE_TEST_SUITE_P(TiledAndRestart, PackedDocuments,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));
