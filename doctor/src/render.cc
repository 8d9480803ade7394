// The report as a table for people and JSON for programs.
#include "muster/doctor/render.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "doctor/src/util.h"
#include "muster/doctor/report.h"

namespace muster::doctor {

using internal::Lower;
using internal::Wrap;

absl::string_view StatusName(Status status) {
  switch (status) {
    case Status::kPass:
      return "PASS";
    case Status::kInfo:
      return "INFO";
    case Status::kWarn:
      return "WARN";
    case Status::kFail:
      return "FAIL";
  }
  return "FAIL";
}

int Report::ExitStatus() const {
  for (const Check& c : checks) {
    if (c.status == Status::kFail) return 1;
  }
  return 0;
}

std::string FormatText(const Report& report, int width_in) {
  const size_t width = static_cast<size_t>(std::max(width_in, 60));
  size_t title_width = 5;
  for (const Check& c : report.checks) {
    title_width = std::max(title_width, c.title.size());
  }
  title_width = std::min<size_t>(title_width, 40);
  const std::string indent(8, ' ');
  std::string out = absl::StrCat("muster doctor on ", report.hostname,
                                 " (fix commands for ", report.os, ")\n\n");
  auto pad = [](const std::string& s, size_t n) {
    return s.size() >= n ? s : s + std::string(n - s.size(), ' ');
  };
  absl::StrAppend(&out, pad("STATUS", 8), pad("CHECK", title_width + 2),
                  "RESULT\n");
  int counts[4] = {0, 0, 0, 0};
  for (const Check& c : report.checks) {
    ++counts[static_cast<int>(c.status)];
    std::string head = pad(std::string(StatusName(c.status)), 8);
    std::string title = c.title;
    if (title.size() > title_width) {
      // A long title gets its own line; the result goes under it.
      absl::StrAppend(&out, head, title, "\n");
      head = std::string(8, ' ');
      title.clear();
    }
    absl::StrAppend(&head, pad(title, title_width + 2));
    const std::string result_indent(head.size(), ' ');
    absl::StrAppend(&out, head,
                    Wrap(c.summary, head.size(), result_indent, width), "\n");
    for (const std::string& e : c.evidence) {
      absl::StrAppend(&out, indent, "- ",
                      Wrap(e, indent.size() + 2, indent + "  ", width), "\n");
    }
    for (const std::string& f : c.fix) {
      absl::StrAppend(
          &out, indent,
          "fix: ", Wrap(f, indent.size() + 5, indent + "     ", width), "\n");
    }
    for (const std::string& cmd : c.commands) {
      absl::StrAppend(&out, indent, "  $ ", cmd, "\n");
    }
  }
  absl::StrAppend(&out, "\n", counts[3], " failed, ", counts[2], " warning",
                  counts[2] == 1 ? "" : "s", ", ", counts[0], " passed, ",
                  counts[1], " info\n");
  return out;
}

std::string FormatJson(const Report& report) {
  nlohmann::json j;
  j["host"] = report.hostname;
  j["os"] = report.os;
  nlohmann::json checks = nlohmann::json::array();
  nlohmann::json counts = {{"pass", 0}, {"info", 0}, {"warn", 0}, {"fail", 0}};
  for (const Check& c : report.checks) {
    nlohmann::json cj;
    cj["id"] = c.id;
    cj["title"] = c.title;
    cj["status"] = std::string(StatusName(c.status));
    cj["summary"] = c.summary;
    cj["evidence"] = c.evidence;
    cj["fix"] = c.fix;
    cj["commands"] = c.commands;
    cj["data"] = c.data;
    checks.push_back(std::move(cj));
    const std::string key = Lower(StatusName(c.status));
    counts[key] = counts[key].get<int>() + 1;
  }
  j["checks"] = std::move(checks);
  j["counts"] = std::move(counts);
  j["exit_status"] = report.ExitStatus();
  return j.dump(2) + "\n";
}

}  // namespace muster::doctor
