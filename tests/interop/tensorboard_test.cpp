// TensorBoard event files: a reader written here from the TFRecord and protobuf wire-format
// descriptions (bitwise CRC-32C, not the writer's table; a generic field decoder, not the
// writer's encoder) parses what `trillion train --set train.tensorboard=true` writes: both CRCs
// of every record verify, the first event is file_version "brain.Event:2", and each later event
// is one metrics.jsonl line (its step, and one simple_value per number, nested keys joined by
// '/'). Off by default; a flipped byte is caught by the reader.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "../train/cli_util.h"
#include "train/tensorboard.h"

namespace trillion {
namespace {

using testing::fresh_dir;
using testing::run_trillion;

// CRC-32C bit by bit: reflected Castagnoli polynomial 0x82F63B78, init and final xor all ones.
uint32_t crc32c_bitwise(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

template <typename T>
T load_le(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// TFRecords of a file; throws std::runtime_error naming the record whose CRC is wrong.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    if (at + 12 > bytes.size()) throw std::runtime_error("truncated record header");
    const auto length = load_le<uint64_t>(bytes, at);
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    if (load_le<uint32_t>(bytes, at + 8) != mask(crc32c_bitwise(p + at, 8))) {
      throw std::runtime_error("length CRC of record " + std::to_string(records.size()));
    }
    if (at + 12 + length + 4 > bytes.size()) throw std::runtime_error("truncated record");
    if (load_le<uint32_t>(bytes, at + 12 + length) != mask(crc32c_bitwise(p + at + 12, length))) {
      throw std::runtime_error("data CRC of record " + std::to_string(records.size()));
    }
    records.push_back(bytes.substr(at + 12, length));
    at += 12 + length + 4;
  }
  return records;
}

// One protobuf field: its wire type and either the integer (varint, fixed64, fixed32 bits) or
// the bytes (length-delimited).
struct Field {
  int wire_type;
  uint64_t number;
  std::string bytes;
};
std::multimap<int, Field> decode_message(const std::string& m) {
  std::multimap<int, Field> fields;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= m.size() || shift > 63) throw std::runtime_error("bad varint");
      const auto b = static_cast<unsigned char>(m[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < m.size()) {
    const uint64_t key = varint();
    Field f{static_cast<int>(key & 7), 0, {}};
    if (f.wire_type == 0) {
      f.number = varint();
    } else if (f.wire_type == 1) {
      f.number = load_le<uint64_t>(m, at);
      at += 8;
    } else if (f.wire_type == 5) {
      f.number = load_le<uint32_t>(m, at);
      at += 4;
    } else if (f.wire_type == 2) {
      const uint64_t n = varint();
      f.bytes = m.substr(at, n);
      at += n;
    } else {
      throw std::runtime_error("wire type " + std::to_string(f.wire_type));
    }
    if (at > m.size()) throw std::runtime_error("field past the end");
    fields.emplace(static_cast<int>(key >> 3), f);
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  std::map<std::string, float> scalars;
};
Event decode_event(const std::string& record) {
  Event e;
  for (const auto& [number, f] : decode_message(record)) {
    if (number == 1 && f.wire_type == 1) std::memcpy(&e.wall_time, &f.number, 8);
    if (number == 2 && f.wire_type == 0) e.step = static_cast<int64_t>(f.number);
    if (number == 3 && f.wire_type == 2) e.file_version = f.bytes;
    if (number == 5 && f.wire_type == 2) {
      for (const auto& [vn, value] : decode_message(f.bytes)) {
        if (vn != 1) continue;
        std::string tag;
        float simple = NAN;
        for (const auto& [n, vf] : decode_message(value.bytes)) {
          if (n == 1 && vf.wire_type == 2) tag = vf.bytes;
          if (n == 2 && vf.wire_type == 5) {
            const auto bits = static_cast<uint32_t>(vf.number);
            std::memcpy(&simple, &bits, 4);
          }
        }
        e.scalars[tag] = simple;
      }
    }
  }
  return e;
}

// Every number of a metrics line but its step and wall-clock time (the event's own fields).
void expected_scalars(const nlohmann::json& j, const std::string& prefix,
                      std::map<std::string, float>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string tag = prefix.empty() ? k : prefix + "/" + k;
    if (v.is_object()) expected_scalars(v, tag, out);
    else if (v.is_number() && !(prefix.empty() && (k == "step" || k == "time"))) out[tag] = v.get<float>();
  }
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path().string());
  }
  return files;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TensorBoard, Crc32cOfTheStandardCheckString) {
  const char* s = "123456789";  // CRC-32C check value 0xE3069283 (RFC 3720, B.4)
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_bitwise(reinterpret_cast<const unsigned char*>(s), 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, TrainingWritesOneEventPerMetricsLine) {
  const std::string root = fresh_dir("tensorboard");
  const double before = static_cast<double>(std::time(nullptr)) - 1;
  const auto r = run_trillion("train " + testing::config_path("tiny.toml") + " --run-dir " + root +
                              " --set train.tensorboard=true --set train.eval_every=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double after = static_cast<double>(std::time(nullptr)) + 1;
  const auto files = event_files(root);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(std::regex_match(std::filesystem::path(files[0]).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.[0-9]{10}\.[^/]+)")))
      << files[0];
  const auto records = read_records(read_all(files[0]));

  std::vector<nlohmann::json> lines;
  std::ifstream metrics(root + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 20u);
  ASSERT_EQ(records.size(), lines.size() + 1);

  const Event first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_GE(first.wall_time, before);
  EXPECT_LE(first.wall_time, after);
  size_t with_val_loss = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Event e = decode_event(records[i + 1]);
    EXPECT_EQ(e.step, lines[i]["step"].get<int64_t>());
    EXPECT_TRUE(e.file_version.empty());
    EXPECT_GE(e.wall_time, first.wall_time);
    EXPECT_LE(e.wall_time, after);
    std::map<std::string, float> want;
    expected_scalars(lines[i], "", want);
    EXPECT_EQ(e.scalars, want) << "step " << e.step;  // same tags, bitwise the same floats
    with_val_loss += e.scalars.count("val_loss");
    EXPECT_EQ(e.scalars.count("loss"), 1u);
    EXPECT_EQ(e.scalars.count("memory/activations"), 1u);
  }
  EXPECT_EQ(with_val_loss, 2u);  // steps 10 and 20

  // The reader is not a rubber stamp: one flipped data byte fails the data CRC.
  std::string bytes = read_all(files[0]);
  bytes[bytes.size() - 10] ^= 0x01;
  EXPECT_THROW(read_records(bytes), std::runtime_error);
}

// A run resumed from an earlier checkpoint than its last metrics (as after a crash): the event
// files together hold every step once, the resumed steps' events in a new file equal the resumed
// metrics.jsonl, and the old file keeps only the steps up to the checkpoint.
TEST(TensorBoard, ResumeWritesEachStepOnce) {
  const std::string root = fresh_dir("tensorboard_resume");
  const std::string args = "train " + testing::config_path("tiny.toml") + " --run-dir " + root +
                           " --set train.tensorboard=true --set train.checkpoint_every=5";
  ASSERT_EQ(run_trillion(args).exit_code, 0);
  const auto first_files = event_files(root);
  ASSERT_EQ(first_files.size(), 1u);
  const std::string first_bytes = read_all(first_files[0]);
  ASSERT_EQ(read_records(first_bytes).size(), 21u);  // version + steps 1..20
  // The checkpoint of step 20 is lost (the newest left is step 15's), and the last record was
  // torn by the crash.
  std::filesystem::remove_all(root + "/checkpoints/step_00000020");
  ASSERT_TRUE(std::filesystem::exists(root + "/checkpoints/step_00000015"));
  {
    std::ofstream torn(first_files[0], std::ios::binary | std::ios::app);
    torn << tfrecord(tensorboard_scalar_event(1.0, 21, {{"loss", 1.0f}})).substr(0, 15);
  }
  const auto r = run_trillion(args + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto files = event_files(root);
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 2u);  // a new file, after the old one in name order
  EXPECT_EQ(files[0], first_files[0]);
  std::map<int64_t, int> seen;
  std::map<int64_t, Event> by_step;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto records = read_records(read_all(files[f]));  // throws on a torn record
    EXPECT_EQ(decode_event(records[0]).file_version, "brain.Event:2");
    for (size_t i = 1; i < records.size(); ++i) {
      const Event e = decode_event(records[i]);
      ++seen[e.step];
      by_step[e.step] = e;
      EXPECT_EQ(e.step <= 15, f == 0) << "step " << e.step << " in file " << f;
    }
  }
  ASSERT_EQ(seen.size(), 20u);
  for (const auto& [step, count] : seen) EXPECT_EQ(count, 1) << "step " << step;
  EXPECT_EQ(seen.begin()->first, 1);
  EXPECT_EQ(seen.rbegin()->first, 20);
  EXPECT_NE(r.output.find("step 15"), std::string::npos) << r.output;  // resumed there
  // The old file's steps 1..15 are its original bytes (a prefix of what it held).
  const std::string old_now = read_all(files[0]);
  EXPECT_EQ(first_bytes.substr(0, old_now.size()), old_now);
  // Every event equals its metrics.jsonl line (steps 16..20 being the resumed run's).
  std::ifstream metrics(root + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    std::map<std::string, float> want;
    expected_scalars(j, "", want);
    EXPECT_EQ(by_step[j["step"].get<int64_t>()].scalars, want) << line;
  }
  EXPECT_EQ(lines, 20);
}

TEST(TensorBoard, OffByDefault) {
  const std::string root = fresh_dir("tensorboard_off");
  const auto r = run_trillion("train " + testing::config_path("tiny.toml") + " --run-dir " + root +
                              " --set train.steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(event_files(root).empty());
  EXPECT_TRUE(std::filesystem::exists(root + "/metrics.jsonl"));
}

}  // namespace
}  // namespace trillion
