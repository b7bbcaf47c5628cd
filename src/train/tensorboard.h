// TensorBoard event files written by hand from the format (no protobuf library): a TFRecord
// stream (uint64 LE length, masked CRC32C of those 8 bytes, the data, masked CRC32C of the data)
// of Event protos. The first event carries file_version "brain.Event:2"; every later one has
// wall_time, step and a Summary with one simple_value per scalar. Field numbers (tensorflow's
// event.proto / summary.proto): Event.wall_time 1 (double), step 2 (int64), file_version 3
// (string), summary 5; Summary.value 1; Summary.Value.tag 1 (string), simple_value 2 (float).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace trillion {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// Serialized Event protos.
std::string tensorboard_version_event(double wall_time);
std::string tensorboard_scalar_event(double wall_time, int64_t step,
                                     const std::vector<std::pair<std::string, float>>& scalars);
// One TFRecord: the framing around `data`.
std::string tfrecord(const std::string& data);

// A resumed run (from the checkpoint of step last_step) drops, from every event file in `dir`,
// the scalar events of steps > last_step and a torn last record, as metrics.jsonl drops those
// lines: the resumed run writes those steps again into its own new file, so the directory holds
// each step once (one curve in TensorBoard). Returns the number of records dropped.
int64_t truncate_tensorboard_events(const std::string& dir, int64_t last_step);

// Writes events to a new DIR/events.out.tfevents.<unix time>.<host>[.n] (the name TensorBoard
// globs for), starting with the file_version event.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  const std::string& path() const { return path_; }
  // One event with a scalar per number in the metrics JSON object `json_line` (nested objects
  // flattened with '/', e.g. memory/activations; "step" is the event's step, "time" or
  // "wall_time" its wall time when present, else now). Flushed, like metrics.jsonl.
  void metrics(const std::string& json_line);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace trillion
