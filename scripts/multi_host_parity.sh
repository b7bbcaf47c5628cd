#!/usr/bin/env bash
# The multi-host parity runs CTest leaves out for time (tests/comm/multi_host_test.cpp): pp 2 x dp 2
# and cp 2 x dp 2 on 2 emulated hosts (scripts/hosts.sh) train the one-process run, and the hosts'
# NICs carry the engine's cross-host bytes. Needs root and network namespaces (skips otherwise).
# Run after scripts/build.sh; about 15 s.
set -euo pipefail
cd "$(dirname "$0")/.."
exec build/tests/test_comm --gtest_also_run_disabled_tests \
  --gtest_filter='DISABLED_MoreLayouts/MultiHost.*:Layouts/MultiHost.*'
