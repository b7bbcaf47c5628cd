// Loader: the permutation covers every sample once per epoch, order is a pure function of
// (seed, global index), exact resume, windows are shifted targets, data-parallel slicing.
#include "data/loader.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"

using namespace trillion;
using namespace trillion::data;

namespace {
std::shared_ptr<InMemoryDataset> counting_dataset(int64_t n, int64_t vocab) {
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i % vocab);
  return std::make_shared<InMemoryDataset>(tokens, vocab, "counting");
}
}  // namespace

TEST(SamplePermutation, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 17ull, 64ull, 1000ull, 4097ull, 65537ull}) {
    SamplePermutation perm(n, 123);
    for (uint64_t epoch : {0ull, 1ull, 7ull}) {
      std::vector<char> seen(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t j = perm.map(epoch, i);
        ASSERT_LT(j, n);
        ASSERT_FALSE(seen[j]) << "n=" << n << " epoch=" << epoch << " repeats " << j;
        seen[j] = 1;
      }
    }
  }
}

TEST(SamplePermutation, DependsOnSeedAndEpochAndShuffles) {
  const uint64_t n = 1000;
  SamplePermutation a(n, 1), b(n, 2);
  int same_seed = 0, same_epoch = 0, fixed_points = 0;
  for (uint64_t i = 0; i < n; ++i) {
    same_seed += a.map(0, i) == b.map(0, i);
    same_epoch += a.map(0, i) == a.map(1, i);
    fixed_points += a.map(0, i) == i;
  }
  EXPECT_LT(same_seed, 20);  // a random pair of permutations agrees in ~1 place
  EXPECT_LT(same_epoch, 20);
  EXPECT_LT(fixed_points, 20);
}

TEST(DataLoader, WindowsAreShiftedTargets) {
  auto ds = counting_dataset(1001, 1 << 20);
  DataLoader loader(ds, 10, 9, SampleOrder::kSequential);
  EXPECT_EQ(loader.num_samples(), 100);
  std::vector<int32_t> x(10), y(10);
  loader.sample(3, x.data(), y.data());
  for (int t = 0; t < 10; ++t) {
    EXPECT_EQ(x[t], 30 + t);
    EXPECT_EQ(y[t], 31 + t);
  }
  loader.sample(103, x.data(), y.data());  // epoch 1, sequential: the same sample
  EXPECT_EQ(x[0], 30);
}

TEST(DataLoader, EveryEpochCoversEverySampleOnce) {
  auto ds = counting_dataset(5 * 333 + 1, 1 << 20);
  DataLoader loader(ds, 5, 77);
  ASSERT_EQ(loader.num_samples(), 333);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int32_t> starts;
    std::vector<int32_t> x(5), y(5);
    for (uint64_t i = 0; i < 333; ++i) {
      loader.sample(epoch * 333 + i, x.data(), y.data());
      starts.insert(x[0]);
    }
    EXPECT_EQ(starts.size(), 333u);
    EXPECT_EQ(*starts.begin(), 0);
    EXPECT_EQ(*starts.rbegin(), 5 * 332);
  }
}

TEST(DataLoader, OrderIsAPureFunctionOfSeedAndIndexAndResumesExactly) {
  auto ds = counting_dataset(64 * 50 + 1, 1 << 20);
  DataLoader a(ds, 64, 2024), b(ds, 64, 2024), c(ds, 64, 2025);
  const int kBatch = 4;
  std::vector<int32_t> run_x(kBatch * 64 * 30), run_y(run_x.size());
  // An uninterrupted run of 30 batches (2.4 epochs).
  for (int step = 0; step < 30; ++step) {
    a.batch(step * kBatch, kBatch, &run_x[step * kBatch * 64], &run_y[step * kBatch * 64]);
  }
  // A run "resumed" at step 17 by a fresh loader reads exactly the same batches from there on.
  std::vector<int32_t> x(kBatch * 64), y(kBatch * 64);
  for (int step = 17; step < 30; ++step) {
    b.batch(step * kBatch, kBatch, x.data(), y.data());
    EXPECT_TRUE(std::equal(x.begin(), x.end(), run_x.begin() + step * kBatch * 64));
    EXPECT_TRUE(std::equal(y.begin(), y.end(), run_y.begin() + step * kBatch * 64));
  }
  int differing = 0;
  for (uint64_t g = 0; g < 50; ++g) differing += a.dataset_sample(g) != c.dataset_sample(g);
  EXPECT_GT(differing, 40);
}

TEST(DataLoader, DataParallelRanksSliceTheGlobalBatch) {
  auto ds = counting_dataset(8 * 100 + 1, 1 << 20);
  DataLoader loader(ds, 8, 5);
  const int kGlobal = 12, kDp = 3, kLocal = kGlobal / kDp;
  std::vector<int32_t> whole_x(kGlobal * 8), whole_y(kGlobal * 8);
  loader.batch(36, kGlobal, whole_x.data(), whole_y.data());
  for (int r = 0; r < kDp; ++r) {
    std::vector<int32_t> x(kLocal * 8), y(kLocal * 8);
    loader.batch(36 + r * kLocal, kLocal, x.data(), y.data());
    EXPECT_TRUE(std::equal(x.begin(), x.end(), whole_x.begin() + r * kLocal * 8));
  }
}

TEST(DataLoader, TooLittleDataIsAClearError) {
  auto ds = counting_dataset(10, 100);
  try {
    DataLoader loader(ds, 10, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few for one sample of seq_len 10"),
              std::string::npos);
  }
}

TEST(DataLoader, VocabMismatchIsAClearError) {
  auto ds = counting_dataset(100, 300);
  EXPECT_NO_THROW(check_vocab_fits(*ds, 300));
  try {
    check_vocab_fits(*ds, 256);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("vocab size 300"), std::string::npos) << m;
    EXPECT_NE(m.find("vocab_size 256"), std::string::npos) << m;
  }
}
