// See tensorboard.h. Protobuf wire format: a field is key = (number << 3 | wire type) as a
// varint, then varint (type 0), 8 bytes LE (1), length-delimited bytes (2) or 4 bytes LE (5).
#include "train/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/file_io.h"

namespace trillion {

namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian, as x86 and aarch64 store it
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, float>>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string tag = prefix.empty() ? key : prefix + "/" + key;
    if (value.is_object()) {
      flatten(value, tag, out);
    } else if (value.is_number() && !(prefix.empty() && (key == "step" || key == "time" ||
                                                           key == "wall_time"))) {
      out.emplace_back(tag, static_cast<float>(value.get<double>()));
    }
  }
}

// The step of a serialized Event (field 2, varint), or -1 when it has none (the file_version
// event) or cannot be read.
int64_t event_step(const std::string& m) {
  size_t at = 0;
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= m.size()) return false;
      const auto b = static_cast<unsigned char>(m[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  uint64_t key = 0, v = 0;
  while (at < m.size() && varint(key)) {
    const uint64_t wire = key & 7;
    if (wire == 0) {
      if (!varint(v)) return -1;
      if (key >> 3 == 2) return static_cast<int64_t>(v);
    } else if (wire == 1) {
      at += 8;
    } else if (wire == 5) {
      at += 4;
    } else if (wire == 2) {
      if (!varint(v)) return -1;
      at += v;
    } else {
      return -1;
    }
  }
  return -1;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tensorboard_version_event(double wall_time) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string tensorboard_scalar_event(double wall_time, int64_t step,
                                     const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, 5);
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, 5, summary);
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  const uint64_t length = data.size();
  put_fixed(r, length);
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += data;
  put_fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

int64_t truncate_tensorboard_events(const std::string& dir, int64_t last_step) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) return 0;
  int64_t dropped = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) != 0 || !entry.is_regular_file()) continue;
    const std::string bytes = data::read_file_raw(entry.path().string());
    std::string kept;
    size_t at = 0;
    int64_t removed = 0;
    while (at + 12 <= bytes.size()) {
      uint64_t length;
      uint32_t length_crc, data_crc;
      std::memcpy(&length, bytes.data() + at, 8);
      std::memcpy(&length_crc, bytes.data() + at + 8, 4);
      if (length_crc != masked_crc32c(bytes.data() + at, 8) || length > bytes.size() - at - 12 ||
          bytes.size() - at - 12 - length < 4)
        break;  // a torn record from a killed run: it and anything after it go
      std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
      const std::string record = bytes.substr(at + 12, length);
      if (data_crc != masked_crc32c(record.data(), record.size())) break;
      if (event_step(record) <= last_step) {
        kept.append(bytes, at, 12 + length + 4);
      } else {
        ++removed;
      }
      at += 12 + length + 4;
    }
    if (kept.size() == bytes.size()) continue;
    if (at < bytes.size()) ++removed;  // the torn tail
    data::write_file_atomic(entry.path().string(), {kept});
    dropped += removed;
  }
  return dropped;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double now = now_seconds();
  // A new file per writer (a resumed run within the same second gets a suffix): TensorBoard
  // reads a directory's files in name order, so later names hold later events.
  const std::string base =
      fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(now), host);
  path_ = base;
  for (int n = 1; std::filesystem::exists(path_); ++n) path_ = fmt::format("{}.{}", base, n);
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) {
    throw Error(fmt::format("cannot write the TensorBoard event file '{}' (train.tensorboard = "
                            "true): check the run directory is writable",
                            path_));
  }
  out_ << tfrecord(tensorboard_version_event(now));
  out_.flush();
}

void TensorBoardWriter::metrics(const std::string& json_line) {
  const auto j = nlohmann::json::parse(json_line, nullptr, false);
  if (!j.is_object()) return;  // metrics.jsonl lines are objects; anything else has no scalars
  std::vector<std::pair<std::string, float>> scalars;
  flatten(j, "", scalars);
  double wall_time = now_seconds();
  for (const char* key : {"time", "wall_time"}) {
    if (j.contains(key) && j[key].is_number()) wall_time = j[key].get<double>();
  }
  const int64_t step = j.contains("step") && j["step"].is_number_integer() ? j["step"].get<int64_t>() : 0;
  out_ << tfrecord(tensorboard_scalar_event(wall_time, step, scalars));
  out_.flush();
}

}  // namespace trillion
