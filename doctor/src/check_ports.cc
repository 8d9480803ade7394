// Local ports in use, and by whom.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/checks.h"

namespace muster::doctor {
namespace {

using internal::KillCommand;
using internal::SocketsOn;

bool IsMusterProcess(const std::string& command) {
  std::vector<std::string> words = absl::StrSplit(command, ' ');
  if (words.empty()) return false;
  std::string exe = words[0].substr(words[0].rfind('/') + 1);
  return exe == "musterd" || exe == "muster";
}

}  // namespace

Check PortsCheck(const std::vector<PortUse>& uses,
                 const std::map<int, int>& bind_errors,
                 const std::vector<platform::TcpSocket>& sockets,
                 const std::string& os) {
  Check c;
  c.id = "ports";
  std::vector<std::string> labels;
  int total = 0;
  for (const PortUse& u : uses) {
    labels.push_back(absl::StrCat(PortRangesText({u.range}), " (", u.why, ")"));
  }
  c.title = "local ports";
  c.evidence.push_back(absl::StrCat("checked: ", absl::StrJoin(labels, ", ")));
  nlohmann::json ports = nlohmann::json::array();
  int taken_required = 0;
  int taken_other = 0;
  int served_by_muster = 0;
  std::vector<std::string> taken_words;
  std::vector<int> pids;
  std::map<int, std::string> commands;
  bool truncated = false;
  std::set<int> seen;
  for (const PortUse& u : uses) {
    for (int p = u.range.first; p <= u.range.last; ++p) {
      if (!seen.insert(p).second) continue;
      if (total >= kMaxPortsChecked) {
        truncated = true;
        break;
      }
      ++total;
      auto bind_error = bind_errors.find(p);
      if (bind_error == bind_errors.end() || bind_error->second == 0) continue;
      const int err = bind_error->second;
      nlohmann::json pj = {{"port", p},
                           {"free", false},
                           {"error", std::strerror(err)},
                           {"why", u.why}};
      nlohmann::json holders = nlohmann::json::array();
      std::vector<std::string> who;
      bool muster_holds = false;
      for (const platform::TcpSocket& s : SocketsOn(sockets, p)) {
        holders.push_back({{"pid", s.pid},
                           {"command", s.command},
                           {"state", s.state},
                           {"local", s.local},
                           {"remote", s.remote}});
        std::string w = absl::StrCat(s.state, " ", s.local);
        if (s.state != "LISTEN") absl::StrAppend(&w, " <-> ", s.remote);
        if (s.pid > 0) {
          absl::StrAppend(&w, ", pid ", s.pid, " (", s.command, ")");
          if (std::find(pids.begin(), pids.end(), s.pid) == pids.end()) {
            pids.push_back(s.pid);
            commands[s.pid] = s.command;
          }
          if (s.state == "LISTEN" && IsMusterProcess(s.command)) {
            muster_holds = true;
          }
        } else {
          absl::StrAppend(&w,
                          ", owner not visible (another user's process: "
                          "run as root)");
        }
        who.push_back(w);
      }
      pj["holders"] = holders;
      ports.push_back(pj);
      if (who.empty()) {
        who.push_back(absl::StrCat("bind failed: ", std::strerror(err)));
      }
      std::string line = absl::StrCat("port ", p, " (", u.why,
                                      ") is taken: ", absl::StrJoin(who, "; "));
      if (u.muster_ok && muster_holds) {
        ++served_by_muster;
        c.evidence.push_back(
            absl::StrCat("port ", p, " (", u.why,
                         ") is served by muster: ", absl::StrJoin(who, "; ")));
        continue;
      }
      c.evidence.push_back(line);
      taken_words.push_back(absl::StrCat(p));
      if (u.required) {
        ++taken_required;
      } else {
        ++taken_other;
      }
    }
  }
  if (truncated) {
    c.evidence.push_back(absl::StrCat("only the first ", kMaxPortsChecked,
                                      " ports were checked"));
  }
  c.data["ports"] = ports;
  c.data["checked"] = total;
  const int taken = taken_required + taken_other;
  if (taken == 0) {
    c.status = Status::kPass;
    c.summary =
        served_by_muster > 0
            ? absl::StrCat("free, or served by muster (", total, " checked)")
        : total == 1 ? std::string("free")
                     : absl::StrCat("all ", total, " free");
    return c;
  }
  c.status = taken_required > 0 ? Status::kFail : Status::kWarn;
  std::string owners;
  if (!pids.empty()) {
    std::vector<std::string> ps;
    for (int pid : pids) ps.push_back(absl::StrCat("pid ", pid));
    owners = absl::StrCat(" by ", absl::StrJoin(ps, ", "));
  }
  c.summary = absl::StrCat(
      taken == 1 ? "port " : "ports ", absl::StrJoin(taken_words, ", "),
      taken == 1 ? " is" : " are", " in use", owners,
      " ('Address already in use' for a server started there)");
  c.fix.push_back(
      "Stop the process that holds it if it is left over from an earlier run, "
      "or give the job other ports (--master-port, --rdzv-endpoint=HOST:PORT); "
      "a plain single-node `muster` picks free ephemeral ports itself.");
  for (int pid : pids) {
    std::string cmd = commands[pid];
    if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
    c.commands.push_back(absl::StrCat(KillCommand(os, pid), "   # ", cmd));
  }
  return c;
}

}  // namespace muster::doctor
