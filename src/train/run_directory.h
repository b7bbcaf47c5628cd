// RunDirectory: the files of one run — config.toml (fully resolved), metrics.jsonl (one JSON
// object per step), events.log, summary.json, checkpoints/. Only the lead rank (world rank 0)
// writes; on the others every write is a no-op, so the trainer calls them unconditionally.
// Invariants: a directory that already holds a run is never reused without --resume (nothing is
// touched before that check); a resumed run's metrics.jsonl and TensorBoard event files keep only
// the steps up to the checkpoint it resumed from (the later ones are written again); every file
// but the appended logs is written atomically. With train.tensorboard = true in the config start() is given,
// every metrics line is also a TensorBoard event (events.out.tfevents.*).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/tensorboard.h"

namespace trillion {

// An append-only log (metrics.jsonl, events.log): each line is appended whole or not at all. A
// failed write (a full disk, EIO) is cut back off the file and retried with a doubling wait, 3.1 s
// in all, so a disk full for a moment costs a pause, not a line; what still fails is returned.
class AppendLog {
 public:
  AppendLog() = default;
  ~AppendLog();
  AppendLog(const AppendLog&) = delete;
  AppendLog& operator=(const AppendLog&) = delete;
  // Throws Error naming the file and the cause when it cannot be opened for appending (a
  // read-only file or file system): said before a run trains, not discovered after.
  void open(const std::string& path);
  bool is_open() const { return fd_ >= 0; }
  // "" when `line` (with its newline) is in the file; otherwise the cause, after the retries.
  // `retried` counts the failed attempts before a success.
  std::string append(const std::string& line, int* retried = nullptr);

 private:
  std::string path_;
  int fd_ = -1;
  bool failing_ = false;  // the last append failed after its retries
  int64_t lines_ = 0, injected_ = 0;  // for TRILLION_METRICS_WRITE_FAILS
};

class RunDirectory {
 public:
  // Throws Error (touching nothing) when `dir` already holds a run and resume is false, or when
  // another trainer holds it (the lead rank keeps an exclusive lock on DIR/.lock while alive).
  RunDirectory(std::string dir, bool resume, bool lead, bool echo_events);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return dir_; }
  bool lead() const { return lead_; }
  std::string metrics_path() const { return dir_ + "/metrics.jsonl"; }

  // Creates the directory and writes config.toml; keeps metrics of steps <= first_step; opens
  // a TensorBoard event file when the config says train.tensorboard = true.
  void start(const std::string& config_toml, int64_t first_step);
  // A timestamped line in events.log (and on stderr unless quiet).
  void event(const std::string& line);
  // Writes `text` to stderr (the console) while it is open. The first failed write (a closed
  // pipe: `train ... | head`, which with SIGPIPE ignored is EPIPE) is noted once in events.log
  // and the console is left alone from then on: training goes on, its record is in the files.
  void console(const std::string& text);
  // One line of metrics.jsonl, written through (a killed run loses at most the line being
  // written), and its numbers as one TensorBoard event when enabled. A write that still fails
  // after AppendLog's retries is said on the console and in events.log, the line is kept in
  // memory (retried at the next call), and write_failure() says why: the trainer then stops
  // with a checkpoint, and the lines never written are part of its error message.
  void metrics(const std::string& json_line);
  void summary(const std::string& text);
  // The first persistent failure to append to metrics.jsonl or events.log ("" when none).
  const std::string& write_failure() const { return write_failure_; }
  // Writes the metrics lines a failure left in memory, if it can now; returns those it could
  // not write (empty when all are in the file).
  // `retried` (when given) gains the failed attempts before successes.
  std::vector<std::string> flush_unwritten_metrics(int* retried = nullptr);

 private:
  std::string dir_;
  bool lead_, echo_;
  bool console_open_ = true;
  int lock_fd_ = -1;
  AppendLog events_, metrics_;
  std::vector<std::string> unwritten_metrics_;
  std::string write_failure_, last_metrics_failure_;
  void note_write_failure(const std::string& file, const std::string& cause);
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// Keeps the lines of `path` (a metrics.jsonl) of steps <= last_step, drops the rest, a torn last
// line and blank lines at its end; a missing file is left missing. Cuts in place (one ftruncate),
// reading back from the end only as far as the last kept line.
void truncate_metrics(const std::string& path, int64_t last_step);

}  // namespace trillion
