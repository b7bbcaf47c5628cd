// See action.h.
#include "schedule/action.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>

#include "core/error.h"

namespace trillion::schedule {
namespace {

constexpr std::array<std::string_view, 7> kKindNames = {"F",      "B",      "W",     "SEND_F",
                                                        "RECV_F", "SEND_B", "RECV_B"};
constexpr std::array<std::string_view, 6> kScheduleNames = {"gpipe", "1f1b",  "interleaved",
                                                            "zb-h1", "zb-h2", "dualpipe"};

int parse_int(std::string_view s, std::string_view whole) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size())
    throw Error(fmt::format(
        "malformed schedule action '{}': expected <stage><kind><microbatch>, e.g. 2F0 or 3SEND_B1",
        whole));
  return value;
}

}  // namespace

std::string_view kind_name(ActionKind kind) {
  return kKindNames[static_cast<int>(kind)];
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight;
}

std::string to_string(const Action& a) {
  return fmt::format("{}{}{}", a.stage, kind_name(a.kind), a.microbatch);
}

Action parse_action(std::string_view text, int rank) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  size_t j = i;
  while (j < text.size() && !std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
  Action a;
  a.rank = rank;
  a.stage = parse_int(text.substr(0, i), text);
  const std::string_view kind = text.substr(i, j - i);
  bool found = false;
  for (size_t k = 0; k < kKindNames.size(); ++k) {
    if (kind == kKindNames[k]) {
      a.kind = static_cast<ActionKind>(k);
      found = true;
    }
  }
  if (!found)
    throw Error(
        fmt::format("malformed schedule action '{}': unknown kind '{}' (use F, B, W, "
                    "SEND_F, RECV_F, SEND_B or RECV_B)",
                    text, kind));
  a.microbatch = parse_int(text.substr(j), text);
  return a;
}

std::string_view schedule_kind_name(ScheduleKind kind) {
  return kScheduleNames[static_cast<int>(kind)];
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  for (size_t k = 0; k < kScheduleNames.size(); ++k)
    if (name == kScheduleNames[k]) return static_cast<ScheduleKind>(k);
  if (name == "zbh1") return ScheduleKind::kZbH1;
  if (name == "zbh2") return ScheduleKind::kZbH2;
  throw Error(fmt::format(
      "unknown pipeline schedule '{}': use gpipe, 1f1b, interleaved, zb-h1, zb-h2 or dualpipe",
      name));
}

std::string Schedule::to_text() const {
  std::string out;
  for (size_t r = 0; r < actions.size(); ++r) {
    out += fmt::format("rank {}:", r);
    for (const Action& a : actions[r]) out += fmt::format(" {}", to_string(a));
    out += '\n';
  }
  return out;
}

}  // namespace trillion::schedule
