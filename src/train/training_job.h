// TrainingJob: the pieces of one training run (train/trainer.h), opened in the order each needs
// the ones before: the checks that need no process (memory plan, --resume's config changes), the
// datasets, the processes, the heartbeat and the run directory, the mesh, this rank's step runner
// and data, DiLoCo, and the state resumed from the newest checkpoint (or the initial parameters).
// Invariants: everything a user can get wrong is refused before the directory is touched, and
// the memory plan is checked before anything large is allocated; once constructed, the runner
// and the data shard stand at start_step and the run directory has recorded the start; the
// members are declared in the order they are opened, so they close in reverse.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "plan/model_spec.h"
#include "train/checkpoint/resume.h"
#include "train/config_diff.h"
#include "train/data_shard.h"
#include "train/datasets.h"
#include "train/diloco.h"
#include "train/fault_drill.h"
#include "train/memory_check.h"
#include "train/metrics.h"
#include "train/mfu_peak.h"
#include "train/noise_scale_log.h"
#include "train/run_directory.h"
#include "train/step_runner.h"
#include "train/trainer.h"

namespace trillion {

struct TrainingJob {
  // Opens the run and resumes it (options.resume) or initialises the parameters.
  TrainingJob(const RunConfig& config, const TrainOptions& options);
  TrainingJob(const TrainingJob&) = delete;
  TrainingJob& operator=(const TrainingJob&) = delete;

  // Measures the GEMM peak (MFU's denominator) and names in events.log what is trained on what:
  // model and layout, the memory plan, the pipeline stages, the mesh's options, DiLoCo.
  void report_start();
  // Validation loss; under DiLoCo of the outer (global) model, averaged over the islands.
  double validate();

  const RunConfig& config;
  const TrainOptions& options;
  const MemoryPlan memory_plan;
  const std::string config_toml;
  const std::vector<ConfigChange> changes;  // --resume with a changed config: what changed
  const RunDatasets datasets;
  // Processes: MPI when a launcher started this one (trillion launch, mpirun, srun), else a
  // group of one.
  std::unique_ptr<comm::MpiRuntime> mpi;
  comm::LocalCommunicator local_world;
  comm::Communicator& world;
  Heartbeat heartbeat;  // at step -1 from its construction until training begins
  RunDirectory dir;
  comm::DeviceMesh mesh;
  MemoryTracker tracker;
  std::unique_ptr<Backend> backend;
  Islands islands;  // with [diloco] the runner trains one island; the data shard stays global
  StepRunner runner;
  DataShard shard;
  const int64_t tokens_per_step;  // global
  std::unique_ptr<Diloco> diloco;
  NoiseScaleLog noise;
  std::vector<CheckpointPart*> parts;  // what checkpoints hold beside the runner's state
  const CheckpointState resumed;       // step 0: a new run
  const int64_t start_step;
  const MfuConvention mfu_flops;
  const plan::ModelCounts counts;
  MfuPeak peak;  // the lead rank's, measured by report_start(); other ranks leave it empty

 private:
  // The state resumed: data position, the --stop-after check, initial parameters of a new run,
  // and the run directory's record of the start.
  void start_at_resumed_step();
};

}  // namespace trillion
