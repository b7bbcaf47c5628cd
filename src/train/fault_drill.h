// What the supervisor (`trillion launch --max-restarts`) sees of a rank, and the failures it can
// inject for tests and drills.
// - Heartbeat: with TRILLION_HEARTBEAT_DIR set, rank R writes "STEP PID" to DIR/rank_R when it
//   starts (step -1), when it starts training and after every step, so a rank that stops making
//   progress is found.
// - Fault drill: TRILLION_FAULTS = comma-separated "kill:STEP:RANK" (SIGKILL after that step),
//   "hang:STEP:RANK" (SIGSTOP after that step; STEP 0 for either: at the end of start-up, before
//   the first step is trained) and "corrupt:STEP" (a byte of that step's
//   checkpoint flipped after it is written). Each fires once per job: a fired fault is recorded
//   in RUN_DIR/.faults_fired before it acts, so a restarted attempt does not fire it again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trillion {

class Heartbeat {
 public:
  explicit Heartbeat(int rank);
  void beat(int64_t step);  // no-op without TRILLION_HEARTBEAT_DIR

 private:
  std::string path_;
};

class FaultDrill {
 public:
  FaultDrill(std::string run_dir, int rank);
  void after_step(int64_t step);
  // Kill and hang faults at step 0, before training begins (after the checkpoint load).
  void at_start() { after_step(0); }
  // The lead rank, once checkpoint `step` is complete in `checkpoint_dir`.
  void after_checkpoint(int64_t step, const std::string& checkpoint_dir);
  // Throws Error for a fault on a rank >= world_size: it would never fire.
  void check_ranks(int world_size) const;

 private:
  struct Fault {
    std::string kind;  // kill | hang | corrupt
    int64_t step = 0;
    int rank = 0;
    std::string text;  // as written in TRILLION_FAULTS
  };
  bool fired(const Fault& f) const;
  void record(const Fault& f) const;

  std::string run_dir_;
  int rank_;
  std::vector<Fault> faults_;
};

// Every fault-injection variable of the trainer (TRILLION_FAULTS, TRILLION_FLIP_PARAMETER_BIT,
// TRILLION_DISK_FULL_AT_STEP, TRILLION_KILL_RANK_AT_STEP,
// TRILLION_METRICS_WRITE_FAILS), read strictly before anything is
// created: a typo or a rank the job does not have would never fire, and the drill would pass
// without having happened. Throws Error naming the variable and the form it takes.
void check_fault_injection(int world_size);

}  // namespace trillion
