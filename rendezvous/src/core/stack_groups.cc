#include "muster/rendezvous/stack_groups.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace muster::rendezvous {
namespace {

const v1::ThreadStack* MainThread(const v1::RankStacks& r) {
  for (const v1::ThreadStack& t : r.threads())
    if (t.main()) return &t;
  return r.threads().empty() ? nullptr : &r.threads(0);
}

}  // namespace

std::vector<StackGroup> GroupStacks(const std::vector<v1::RankStacks>& ranks) {
  // Key: kind, error, frames of the main thread.
  std::map<std::tuple<std::string, std::string, std::vector<std::string>>,
           StackGroup>
      by_key;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const v1::RankStacks& r = ranks[i];
    std::vector<std::string> frames;
    if (const v1::ThreadStack* main = MainThread(r))
      frames.assign(main->frames().begin(), main->frames().end());
    StackGroup& g = by_key[{r.kind(), r.error(), frames}];
    if (g.ranks.empty()) {
      g.frames = std::move(frames);
      g.kind = r.kind();
      g.error = r.error();
    }
    g.ranks.push_back(r.global_rank());
    g.members.push_back(static_cast<int>(i));
  }
  std::vector<StackGroup> groups;
  for (auto& [key, g] : by_key) {
    std::sort(g.ranks.begin(), g.ranks.end());
    groups.push_back(std::move(g));
  }
  std::sort(groups.begin(), groups.end(),
            [](const StackGroup& a, const StackGroup& b) {
              if (a.ranks.size() != b.ranks.size())
                return a.ranks.size() > b.ranks.size();
              return a.ranks.front() < b.ranks.front();
            });
  if (groups.size() > 1) {
    const size_t largest = groups.front().ranks.size();
    for (StackGroup& g : groups) {
      g.odd_one_out =
          g.ranks.size() < largest && g.ranks.size() * 4 <= ranks.size();
    }
  }
  return groups;
}

std::string RankRanges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ranks[i])
                           : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

std::string FormatStackGroups(const std::string& job,
                              const std::vector<v1::RankStacks>& ranks,
                              const std::vector<std::string>& missing) {
  const std::vector<StackGroup> groups = GroupStacks(ranks);
  std::string out = absl::StrCat(
      "job ", job, ": ", ranks.size(), ranks.size() == 1 ? " rank" : " ranks",
      " in ", groups.size(), groups.size() == 1 ? " group" : " groups",
      " of identical main-thread stacks (innermost frame first)\n");
  std::vector<std::string> odd;
  for (const StackGroup& g : groups) {
    if (g.odd_one_out) odd.push_back(RankRanges(g.ranks));
  }
  if (!odd.empty()) {
    absl::StrAppend(&out, "odd ones out: rank", odd.size() == 1 ? " " : "s ",
                    absl::StrJoin(odd, "; "),
                    " (their stacks differ from the rest: look there first)\n");
  }
  for (const StackGroup& g : groups) {
    absl::StrAppend(&out, "\nrank", g.ranks.size() == 1 ? " " : "s ",
                    RankRanges(g.ranks), " (", g.ranks.size(),
                    g.ranks.size() == 1 ? " rank" : " ranks",
                    g.kind.empty() ? "" : ", ", g.kind, ")",
                    g.odd_one_out ? "  <-- odd one out" : "", ":\n");
    if (!g.error.empty()) absl::StrAppend(&out, "    (", g.error, ")\n");
    for (const std::string& f : g.frames)
      absl::StrAppend(&out, "    ", f, "\n");
    // Other threads: how many, once per group (the JSON has them all).
    const v1::RankStacks& first = ranks[static_cast<size_t>(g.members[0])];
    if (first.threads_size() > 1) {
      absl::StrAppend(&out, "    (+", first.threads_size() - 1, " other thread",
                      first.threads_size() == 2 ? "" : "s", " in rank ",
                      first.global_rank(), "; --json lists them)\n");
    }
  }
  if (!missing.empty()) {
    absl::StrAppend(&out, "\nnot answered:\n");
    for (const std::string& m : missing) absl::StrAppend(&out, "  ", m, "\n");
  }
  return out;
}

nlohmann::json StackGroupsJson(const std::string& job,
                               const std::vector<v1::RankStacks>& ranks,
                               const std::vector<std::string>& missing) {
  nlohmann::json out;
  out["job"] = job;
  out["groups"] = nlohmann::json::array();
  for (const StackGroup& g : GroupStacks(ranks)) {
    nlohmann::json j;
    j["ranks"] = g.ranks;
    j["frames"] = g.frames;
    j["kind"] = g.kind;
    j["odd_one_out"] = g.odd_one_out;
    if (!g.error.empty()) j["error"] = g.error;
    nlohmann::json hosts = nlohmann::json::array();
    nlohmann::json others = nlohmann::json::array();
    for (int m : g.members) {
      const v1::RankStacks& r = ranks[static_cast<size_t>(m)];
      hosts.push_back({{"rank", r.global_rank()},
                       {"hostname", r.hostname()},
                       {"pid", r.pid()}});
      const v1::ThreadStack* main = MainThread(r);
      for (const v1::ThreadStack& t : r.threads()) {
        if (&t == main) continue;
        others.push_back(
            {{"rank", r.global_rank()},
             {"tid", t.tid()},
             {"name", t.name()},
             {"frames",
              std::vector<std::string>(t.frames().begin(), t.frames().end())}});
      }
    }
    j["workers"] = std::move(hosts);
    j["other_threads"] = std::move(others);
    out["groups"].push_back(std::move(j));
  }
  out["missing"] = missing;
  return out;
}

}  // namespace muster::rendezvous
