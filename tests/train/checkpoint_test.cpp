// Checkpoint files as a careless user or an attacker could leave them (issue 19): a state.json
// with missing or mistyped fields behind a manifest fixed up to match, a manifest with mistyped
// or absurd entries, a write that fails (`ulimit -f`), and the .tmp-step_N a killed writer
// leaves. Each is one clear message naming the file and field; no JSON library exception or
// assertion is reachable; a failed write leaves nothing half-written and older checkpoints
// intact; `generate` and `--resume` say which checkpoint they skip and why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cli_util.h"
#include "core/error.h"
#include "core/memory.h"
#include "train/checkpoint/checkpoint.h"

using namespace trillion;
using namespace trillion::testing;
namespace fs = std::filesystem;

namespace {

void spit(const fs::path& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

// Replaces a checkpoint file and fixes its manifest entry (size and checksum), so only the
// file's contents can be wrong.
void replace_with_fixed_manifest(const fs::path& dir, const std::string& name,
                                 const std::string& bytes) {
  spit(dir / name, bytes);
  nlohmann::json m = nlohmann::json::parse(slurp(dir / "manifest.json"));
  m[name] = {{"bytes", bytes.size()}, {"xxh64", XXH64(bytes.data(), bytes.size(), 0)}};
  spit(dir / "manifest.json", m.dump(2));
}

// Writes checkpoints of `steps` with parameters filled from the step number.
struct Checkpoints {
  MemoryTracker tracker;
  Buffer params{tracker, MemoryCategory::parameters, DType::f32, 1024};
  Buffer m{tracker, MemoryCategory::optimizer, DType::f32, 1024};
  Buffer v{tracker, MemoryCategory::optimizer, DType::f32, 1024};

  std::string write(const std::string& run_dir, int64_t step, int64_t keep = 5,
                    const CheckpointNote& note = {}) {
    auto* p = static_cast<float*>(params.raw());
    for (int64_t i = 0; i < params.count(); ++i) p[i] = static_cast<float>(step * 1000 + i);
    CheckpointContents c{&params,     &m, &v, {step, step, static_cast<uint64_t>(step * 4), 7},
                         "[model]\n", {}};
    return write_checkpoint(run_dir, c, keep, note);
  }
};

std::string load_error(const std::string& dir) {
  MemoryTracker tracker;
  Buffer params(tracker, MemoryCategory::parameters, DType::f32, 1024);
  try {
    load_checkpoint(dir, params, nullptr, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CheckpointFiles, StateWithMissingOrMistypedFieldsIsReportedByName) {
  const std::string run = fresh_dir("ckpt_state");
  Checkpoints c;
  const fs::path dir = c.write(run, 3);
  ASSERT_EQ(verify_checkpoint(dir), std::nullopt);
  // The crash of issue 19: keys removed, manifest fixed up (a JSON library assertion, SIGABRT).
  replace_with_fixed_manifest(dir, "state.json", R"({"optimizer_steps": 3, "seed": 7})");
  EXPECT_EQ(verify_checkpoint(dir), "state.json: field 'step' is missing");
  EXPECT_EQ(load_error(dir),
            "checkpoint '" + dir.string() + "' is corrupt: state.json: field 'step' is missing");
  replace_with_fixed_manifest(
      dir, "state.json", R"({"step": "3", "optimizer_steps": 3, "next_sample": 12, "seed": 7})");
  EXPECT_EQ(verify_checkpoint(dir), "state.json: field 'step' is a string, expected an integer");
  replace_with_fixed_manifest(
      dir, "state.json", R"({"step": -3, "optimizer_steps": 3, "next_sample": 12, "seed": 7})");
  EXPECT_EQ(verify_checkpoint(dir),
            "state.json: field 'step' = -3 is out of range [0, 9223372036854775807]");
  replace_with_fixed_manifest(dir, "state.json",
                              R"({"step": 3, "optimizer_steps": 3, "next_sample": 12, "seed": 7, )"
                              R"("dtype_bytes": 2})");
  EXPECT_EQ(verify_checkpoint(dir),
            "state.json: field 'dtype_bytes' = 2: expected 4 (f32) or 8 (f64)");
  replace_with_fixed_manifest(dir, "state.json", "[3]");
  EXPECT_EQ(verify_checkpoint(dir), "state.json: expected a JSON object, found an array");
  replace_with_fixed_manifest(dir, "state.json", "{\"step\": ");
  EXPECT_TRUE(has(verify_checkpoint(dir).value_or(""), "state.json: not valid JSON"));
}

TEST(CheckpointFiles, ManifestEntriesAreCheckedBeforeAnyFileIsRead) {
  const std::string run = fresh_dir("ckpt_manifest");
  Checkpoints c;
  const fs::path dir = c.write(run, 4);
  const std::string manifest = slurp(dir / "manifest.json");
  auto with_entry = [&](const nlohmann::json& entry) {
    nlohmann::json m = nlohmann::json::parse(manifest);
    m["params.bin"] = entry;
    spit(dir / "manifest.json", m.dump());
    return verify_checkpoint(dir).value_or("");
  };
  EXPECT_EQ(with_entry({{"bytes", "4096"}, {"xxh64", 1}}),
            "manifest.json entry 'params.bin': field 'bytes' is a string, expected a "
            "non-negative integer");
  EXPECT_EQ(with_entry({{"bytes", 4096}}),
            "manifest.json entry 'params.bin': field 'xxh64' is missing");
  EXPECT_EQ(with_entry(12),
            "manifest.json entry 'params.bin': expected a JSON object, found the "
            "integer 12");
  // A size of a petabyte is compared with the file's size, never allocated or read.
  EXPECT_EQ(with_entry({{"bytes", 1000000000000000}, {"xxh64", 1}}),
            "params.bin has 4096 bytes, manifest says 1000000000000000");
  nlohmann::json m = nlohmann::json::parse(manifest);
  m.erase("optimizer.bin");
  spit(dir / "manifest.json", m.dump());
  EXPECT_EQ(verify_checkpoint(dir), "manifest.json: field 'optimizer.bin' is missing");
  spit(dir / "manifest.json", "null");
  EXPECT_EQ(verify_checkpoint(dir), "manifest.json: expected a JSON object, found null");
  fs::remove(dir / "manifest.json");
  EXPECT_EQ(verify_checkpoint(dir), "manifest.json is missing");
  spit(dir / "manifest.json", manifest);
  fs::remove(dir / "config.toml");
  fs::create_directory(dir / "config.toml");
  EXPECT_EQ(verify_checkpoint(dir), "config.toml is missing or not a regular file");
}

TEST(CheckpointFiles, StaleTempDirectoriesAreRemovedByTheNextWrite) {
  const std::string run = fresh_dir("ckpt_stale");
  Checkpoints c;
  c.write(run, 1);
  // What a writer killed mid-checkpoint leaves (issue 19: they were never cleaned).
  const fs::path stale = fs::path(run) / "checkpoints" / ".tmp-step_00000002";
  fs::create_directories(stale);
  spit(stale / "params.bin", "partial");
  fs::create_directories(fs::path(run) / "checkpoints" / ".tmp-step_00000009");
  c.write(run, 3);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(fs::path(run) / "checkpoints" / ".tmp-step_00000009"));
  const std::vector<std::string> all = list_checkpoints(run);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(fs::path(all[0]).filename(), "step_00000003");
  EXPECT_EQ(verify_checkpoint(all[0]), std::nullopt);
  EXPECT_EQ(verify_checkpoint(all[1]), std::nullopt);
}

// checkpoint.keep: each write that completes deletes all but the newest `keep` (retention runs
// after the new one is sealed, so a failed write deletes nothing).
TEST(CheckpointFiles, RetentionKeepsTheNewestCheckpoints) {
  const std::string run = fresh_dir("ckpt_keep");
  Checkpoints c;
  for (int64_t step = 2; step <= 10; step += 2) c.write(run, step, 2);
  std::vector<std::string> names;
  for (const std::string& d : list_checkpoints(run)) names.push_back(fs::path(d).filename());
  EXPECT_EQ(names, (std::vector<std::string>{"step_00000010", "step_00000008"}));
  c.write(run, 12, 1);
  ASSERT_EQ(list_checkpoints(run).size(), 1u);
  EXPECT_EQ(fs::path(list_checkpoints(run)[0]).filename(), "step_00000012");
  EXPECT_EQ(verify_checkpoint(list_checkpoints(run)[0]), std::nullopt);
}

// Issue 39 item 3: retention counted every step_* directory. An empty step_00000030 with keep = 1
// made the run delete the step_00000020 it had just written (the next --resume found nothing
// valid), a truncated newer checkpoint took a keep slot, a user's step_00000010.bak and step_abc
// were deleted, and names sorted as text (step_99999999999 before step_00000030). Now only
// older complete checkpoints of exact step_N names count and are deleted; invalid ones are left
// and noted; steps above the one written are neither counted nor deleted.
TEST(CheckpointFiles, RetentionDeletesOnlyOlderValidCheckpoints) {
  const std::string run = fresh_dir("ckpt_keep_invalid");
  const fs::path root = fs::path(run) / "checkpoints";
  Checkpoints c;
  std::vector<std::string> notes;
  const CheckpointNote note = [&](const std::string& line) { notes.push_back(line); };
  c.write(run, 10, 1, note);
  fs::create_directories(root / "step_00000030");  // empty: not a checkpoint
  for (const char* user :
       {"step_00000010.bak", "step_abc", "step_20", "step_0000000000000000000001"}) {
    fs::create_directories(root / user);
    spit(root / user / "keep.me", user);
  }
  fs::create_directories(root / "step_99999999999");  // an exact name of a step far ahead
  const std::string s20 = c.write(run, 20, 1, note);
  EXPECT_EQ(verify_checkpoint(s20), std::nullopt);
  EXPECT_FALSE(fs::exists(root / "step_00000010"));  // older and valid: beyond keep = 1
  EXPECT_TRUE(fs::exists(root / "step_00000030"));
  EXPECT_TRUE(fs::exists(root / "step_99999999999"));
  for (const char* user :
       {"step_00000010.bak", "step_abc", "step_20", "step_0000000000000000000001"}) {
    EXPECT_EQ(slurp(root / user / "keep.me"), user);
  }
  EXPECT_EQ(list_checkpoints(run),
            (std::vector<std::string>{(root / "step_99999999999").string(),
                                      (root / "step_00000030").string(), s20}));
  EXPECT_TRUE(notes.empty());  // nothing below step 20 was invalid
  // A truncated checkpoint below the one written is left, noted, and takes no keep slot.
  const std::string s25 = c.write(run, 25, 2, note);
  fs::resize_file(fs::path(s25) / "params.bin", 100);
  const std::string s27 = c.write(run, 27, 2, note);
  EXPECT_TRUE(fs::exists(s25));
  EXPECT_EQ(verify_checkpoint(s20), std::nullopt);  // the one older valid checkpoint kept
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "checkpoint retention leaves " + s25 +
                          " where it is: it is not a valid checkpoint (params.bin has 100 bytes, "
                          "manifest says 4096), so it is neither counted among checkpoint.keep "
                          "= 2 nor deleted; remove it if it is not needed");
  c.write(run, 28, 2, note);
  EXPECT_FALSE(fs::exists(s20));  // now beyond keep = 2 (28, 27)
  EXPECT_EQ(verify_checkpoint(s27), std::nullopt);
  EXPECT_TRUE(fs::exists(s25));
}

// Issue 39 item 12: generate, export and compare on a live run with keep = 1 failed 14 of 40
// times ("manifest.json is missing", "neither a checkpoint nor a run directory"): retention
// deleted the checkpoint they had picked. A reader now pins its checkpoint, and retention leaves
// a pinned one for the next checkpoint to remove.
TEST(CheckpointFiles, RetentionLeavesACheckpointAReaderHolds) {
  const std::string run = fresh_dir("ckpt_pinned");
  Checkpoints c;
  std::vector<std::string> notes;
  const CheckpointNote note = [&](const std::string& line) { notes.push_back(line); };
  const std::string s10 = c.write(run, 10, 1, note);
  std::optional<PinnedCheckpoint> pin = pin_newest_checkpoint(run, -1);
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin->dir(), s10);
  const std::string s20 = c.write(run, 20, 1, note);
  EXPECT_EQ(verify_checkpoint(s10), std::nullopt);  // still whole while it is read
  EXPECT_EQ(notes, std::vector<std::string>{"checkpoint retention leaves " + s10 +
                                            " for now: a reader (generate, export, compare) "
                                            "holds it; a later checkpoint removes it"});
  pin.reset();
  c.write(run, 30, 1, note);
  EXPECT_FALSE(fs::exists(s10));
  EXPECT_FALSE(fs::exists(s20));
}

// Item 12, the other order: the reader lists step 20, then retention (holding the directory's
// lock, as it does while it removes one) removes it before the reader pins it. The reader takes
// step 10 and calls nothing corrupt; before, it returned step 20, which was then gone.
TEST(CheckpointFiles, AReaderPassesOverACheckpointRemovedUnderIt) {
  const std::string run = fresh_dir("ckpt_vanished");
  Checkpoints c;
  const std::string s10 = c.write(run, 10), s20 = c.write(run, 20);
  const int fd = ::open(s20.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  std::vector<std::string> corrupt;
  std::optional<PinnedCheckpoint> pin;
  std::thread reader([&] {
    pin = pin_newest_checkpoint(
        run, -1, [&](const std::string& dir, const std::string&) { corrupt.push_back(dir); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the reader waits on step 20
  fs::remove_all(s20);
  ::close(fd);
  reader.join();
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin->dir(), s10);
  EXPECT_TRUE(corrupt.empty());
  EXPECT_EQ(verify_checkpoint(pin->dir()), std::nullopt);
}

TEST(CheckpointFiles, WriteBeyondTheFileSizeLimitFailsCleanly) {
  const std::string run = fresh_dir("ckpt_fsize");
  Checkpoints c;
  const std::string first = c.write(run, 1);
  const std::string before = slurp(fs::path(first) / "params.bin");
  // In a child: a file size limit below params.bin (4 KiB), SIGXFSZ ignored as main() does.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1000, 1000};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string message = "no error";
    try {
      c.write(run, 2);
    } catch (const Error& e) {
      message = e.what();
    }
    (void)!::write(pipe_fds[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) message.append(buf, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (SIGXFSZ?)";
  const std::string tmp = (fs::path(run) / "checkpoints" / ".tmp-step_00000002").string();
  EXPECT_EQ(message, "checkpoint of step 2 not written: cannot write checkpoint file '" + tmp +
                         "/params.bin': File too large (the file size limit, see 'ulimit -f', "
                         "is too small for it)");
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(list_checkpoints(run), std::vector<std::string>{first});
  EXPECT_EQ(slurp(fs::path(first) / "params.bin"), before);
}

TEST(CheckpointFiles, GenerateAndResumeSaySkippedCheckpoints) {
  const std::string run = fresh_dir("ckpt_skip");
  ASSERT_EQ(run_trillion("train " + config_path("tiny.toml") + " --run-dir " + run +
                         " --quiet --set train.steps=10 --set train.checkpoint_every=5")
                .exit_code,
            0);
  const fs::path newest = fs::path(run) / "checkpoints" / "step_00000010";
  replace_with_fixed_manifest(newest, "state.json", R"({"seed": 1})");
  const std::string reason = "state.json: field 'step' is missing";
  auto r = run_trillion("generate --checkpoint " + run + " --prompt-ids '1 2' --max-tokens 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "skipping corrupt checkpoint " + newest.string() + ": " + reason))
      << r.output;
  r = run_trillion("generate --checkpoint " + newest.string() + " --prompt-ids '1 2'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "error: checkpoint '" + newest.string() + "' is corrupt: " + reason))
      << r.output;
  r = run_trillion("generate --checkpoint " + run + "/metrics.jsonl --prompt-ids '1'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "is not a directory")) << r.output;
  r = run_trillion("train " + config_path("tiny.toml") + " --run-dir " + run +
                   " --resume --set train.steps=12 --set train.checkpoint_every=5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "step_00000010 is corrupt (" + reason + ")")) << r.output;
  EXPECT_TRUE(has(r.output, "at step 5")) << r.output;
}

// An unwritable checkpoint directory is one clear line naming the path. Permission bits do not
// stop root (these tests may run as root), so the directory is made impossible to create: its
// parent is a regular file (ENOTDIR), or a regular file already holds its name.
TEST(CheckpointFiles, UncreatableCheckpointDirectoryIsOneClearLine) {
  const fs::path base = fresh_dir("ckpt_unwritable");
  Checkpoints c;
  fs::create_directories(base);
  spit(base / "run_is_a_file", "x");
  ASSERT_TRUE(fs::is_regular_file(base / "run_is_a_file"));
  const std::string run = (base / "run_is_a_file").string();
  try {
    c.write(run, 1);
    FAIL() << "wrote a checkpoint under a regular file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot create checkpoint directory '" + run + "/checkpoints': Not a directory");
  }
  fs::create_directories(base / "run");
  spit(base / "run" / "checkpoints", "x");
  try {
    c.write((base / "run").string(), 1);
    FAIL() << "wrote a checkpoint where a file named checkpoints is";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot create checkpoint directory '" +
                                         (base / "run" / "checkpoints").string() +
                                         "': a file of that name is in the way");
  }
}
