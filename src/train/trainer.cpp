// See trainer.h. train() reads as the run does: open the job (training_job.h: processes, run
// directory, mesh, step runner, data, resume), report what is trained on what, run the steps
// (training_loop.h: metrics, guard, rollback, early stop, checkpoints), then the final
// checkpoint and summary.json (run_summary.h).
#include "train/trainer.h"

#include "train/training_job.h"
#include "train/training_loop.h"

namespace trillion {

// Set by `trillion train`'s signal handler (cli/train_command.cpp); read by every rank after each
// step, and agreed over the ranks before any stops (TrainingLoop::stops_early).
std::atomic<bool> g_stop_requested{false};

std::string train(const RunConfig& config, const TrainOptions& opt) {
  TrainingJob job(config, opt);
  job.report_start();
  TrainingLoop loop(job);
  loop.run();
  return loop.finish();
}

}  // namespace trillion
