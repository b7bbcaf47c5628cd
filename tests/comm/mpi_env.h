// Test harness for multi-process tests: when the binary runs under a launcher (mpirun from CTest,
// see CMakeLists.txt here), one MpiRuntime lives for the whole test program and tests reach the
// world communicator through mpi_world(); run alone (gtest discovery, plain ctest entries), MPI is
// never initialised and multi-process tests skip themselves.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "comm/mpi_communicator.h"

namespace trillion::testing {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (comm::launch_environment().found) runtime_ = std::make_unique<comm::MpiRuntime>();
  }
  void TearDown() override { runtime_.reset(); }
  static comm::MpiCommunicator* world() { return runtime_ ? &runtime_->world() : nullptr; }

 private:
  static inline std::unique_ptr<comm::MpiRuntime> runtime_;
};

inline comm::MpiCommunicator* mpi_world() {
  return MpiEnvironment::world();
}

}  // namespace trillion::testing

// Skips the test unless it runs under mpirun with at least `min_size` ranks.
#define REQUIRE_MPI(min_size)                                                  \
  do {                                                                         \
    if (::trillion::testing::mpi_world() == nullptr ||                         \
        ::trillion::testing::mpi_world()->size() < (min_size)) {               \
      GTEST_SKIP() << "needs mpirun with at least " << (min_size) << " ranks"; \
    }                                                                          \
  } while (0)
