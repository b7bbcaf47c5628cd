// RunDirectory: the files of one run — config.toml (fully resolved), metrics.jsonl (one JSON
// object per step), events.log, summary.json, checkpoints/. Only the lead rank (world rank 0)
// writes; on the others every write is a no-op, so the trainer calls them unconditionally.
// Invariants: a directory that already holds a run is never reused without --resume (nothing is
// touched before that check); a resumed run's metrics.jsonl and TensorBoard event files keep only
// the steps up to the checkpoint it resumed from (the later ones are written again); every file
// but the appended logs is written atomically. With train.tensorboard = true in the config start() is given,
// every metrics line is also a TensorBoard event (events.out.tfevents.*).
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "train/tensorboard.h"

namespace trillion {

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
  // One line of metrics.jsonl, flushed (a killed run loses at most the line being written), and
  // its numbers as one TensorBoard event when enabled.
  void metrics(const std::string& json_line);
  void summary(const std::string& text);

 private:
  std::string dir_;
  bool lead_, echo_;
  bool console_open_ = true;
  int lock_fd_ = -1;
  std::ofstream events_, metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// Keeps the lines of `path` (a metrics.jsonl) of steps <= last_step, drops the rest, a torn last
// line and blank lines at its end; a missing file is left missing. Cuts in place (one ftruncate),
// reading back from the end only as far as the last kept line.
void truncate_metrics(const std::string& path, int64_t last_step);

}  // namespace trillion
