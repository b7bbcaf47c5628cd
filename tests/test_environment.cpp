// Environment every test process and the trillion commands it starts inherit, set before any
// test runs (a variable already set by the user wins).
//
// After a rank dies, mpirun gives the ranks left 1 s after SIGCONT and 1 s after SIGTERM before
// SIGKILL (Open MPI's odls_base_sigkill_timeout). They cannot finish a collective with a dead
// peer, so that grace only idles; the tests inject dozens of failures and skip it.
#include <cstdlib>

namespace {
const bool kTestEnvironment = [] {
  ::setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 0);
  return true;
}();
}  // namespace
