// TrainingLoop: the steps of an opened TrainingJob, then its end. Each step: the runner's step
// under the guard's judgement and DiLoCo's outer step, the metrics line and the progress line, the
// replicas' check, recovery from a divergence or a fault (rollback to a trusted checkpoint, or
// stop), the decision to stop early, and the interval checkpoint. finish() writes the final
// checkpoint and summary.json. Invariants: every rank takes the same branch at every decision
// (alarms and stop reasons are agreed over the world before acting); no checkpoint is written
// from a streak of skipped updates; nothing is in flight when finish() returns.
#pragma once

#include <cstdint>
#include <string>

#include "core/timer.h"
#include "train/checkpoint/writer.h"
#include "train/guard.h"
#include "train/training_job.h"

namespace trillion {

class TrainingLoop {
 public:
  explicit TrainingLoop(TrainingJob& job);

  // Steps until train.steps or an early stop (a signal, the time budget, --stop-after). Throws
  // Error when the run diverged or a fault was found and no rollback is left.
  void run();
  // The final checkpoint and validation, summary.json; returns its text.
  std::string finish();

 private:
  // One step and what it reports; returns the guard's explanation of a skipped update.
  std::string run_step();
  nlohmann::json metrics_line(const StepStats& st, const DilocoStep& outer, double tokens_per_s,
                              double mfu);
  void print_progress(const StepStats& st, double tokens_per_s, double mfu, bool eval_now);
  // Silent data corruption: the fault a replica check found after this step ("" if none).
  std::string check_replicas();
  // Whether the step loop goes back to a checkpoint after a divergence or a fault (on any rank);
  // throws when it stops instead.
  bool rolled_back(const std::string& fault, const std::string& why);
  [[noreturn]] void stop_after_alarm(const std::string& reason, bool diverged);
  std::string where_to_go_on(const std::string& change) const;
  bool stops_early();
  bool data_runs_out();
  void checkpoint_on_interval();
  void checkpoint(int64_t step);
  [[noreturn]] void fail_on_write(const std::string& summary, const std::string& checkpoint_error);

  TrainingJob& job_;
  FaultDrill drill_;
  // Sync or async checkpoints (train/checkpoint/writer.h); the drill acts once one exists.
  CheckpointWriter checkpoints_;
  const bool tty_;  // the lead rank's progress line rewrites itself
  Timer wall_;
  double train_seconds_ = 0;
  int64_t steps_run_ = 0, step_;
  double last_loss_, val_loss_;
  bool stopped_early_ = false;
  bool write_failed_ = false;  // the lead rank could not append to metrics.jsonl or events.log
  const int kill_at_;  // fault injection: the step this rank kills itself at (0: none)
  StepGuard guard_;
  int64_t rollbacks_ = 0;
};

}  // namespace trillion
