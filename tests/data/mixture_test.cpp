// MixtureLoader (data/mixture.h): weights 0.7 / 0.3 give per-source counts within 1% of the
// weights after any few hundred samples; one source of weight 1 is its DataLoader exactly; each
// source's samples are drawn in order (k = 0, 1, 2, ...), so an epoch of a source reads every
// one of its samples once; the stream is a pure function of the global index.
#include "data/mixture.h"

#include <gtest/gtest.h>

#include "core/error.h"

using namespace trillion::data;

namespace {
std::shared_ptr<const TokenDataset> stream(int64_t n, int32_t first) {
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((first + i) % 50);
  return std::make_shared<InMemoryDataset>(std::move(tokens), 50, "stream");
}
}  // namespace

TEST(Mixture, CountsFollowTheWeightsWithinOnePercent) {
  MixtureLoader mix({stream(8001, 0), stream(2001, 7)}, {0.7, 0.3}, 8, 3);
  std::vector<uint64_t> next(2, 0);
  for (uint64_t g = 0; g < 25000; ++g) {
    const MixtureLoader::Draw d = mix.draw(g);
    ASSERT_EQ(d.index, next[d.source]++) << "sample " << g;  // in order, none skipped
    const uint64_t n = g + 1;
    EXPECT_EQ(mix.samples_before(n, d.source), next[d.source]);
    if (n >= 200) {  // e.g. 50 steps of 4 sequences
      const double share = static_cast<double>(next[0]) / static_cast<double>(n);
      ASSERT_NEAR(share, 0.7, 0.007) << "after " << n << " samples";
    }
  }
  EXPECT_EQ(next[0], 17500u);
  EXPECT_EQ(next[1], 7500u);
  // Source 1 has 250 samples of 8 tokens: its second epoch starts at its 251st sample.
  const uint64_t first_of_epoch2 = [&] {
    for (uint64_t g = 0;; ++g) {
      if (mix.draw(g).source == 1 && mix.draw(g).index == 250) return g;
    }
  }();
  EXPECT_EQ(mix.exhausted_in(0, static_cast<int64_t>(first_of_epoch2)), std::nullopt);
  EXPECT_EQ(mix.exhausted_in(first_of_epoch2 - 3, 4), std::optional<int>(1));
}

TEST(Mixture, OneSourceIsItsLoader) {
  const auto data = stream(3001, 1);
  MixtureLoader mix({data}, {1.0}, 16, 9);
  DataLoader plain(data, 16, 9);
  std::vector<int32_t> a(16), at(16), b(16), bt(16);
  for (uint64_t g = 0; g < 500; g += 7) {
    mix.sample(g, a.data(), at.data());
    plain.sample(g, b.data(), bt.data());
    ASSERT_EQ(a, b) << g;
    ASSERT_EQ(at, bt) << g;
  }
}

TEST(Mixture, BadWeightsAreRefused) {
  EXPECT_THROW(MixtureLoader({stream(100, 0), stream(100, 1)}, {0.5, 0.0}, 8, 1), trillion::Error);
}
