// Connectivity to the endpoint, the master and each peer.
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
#include "muster/doctor/firewall.h"

namespace muster::doctor {
namespace {

using internal::SocketsOn;

nlohmann::json ProbeJson(const ProbeResult& r) {
  nlohmann::json j = {
      {"host", r.host},
      {"port", r.port},
      {"outcome", std::string(ProbeOutcomeName(r.outcome))},
      {"address", r.resolved_address},
      {"elapsed_ms", absl::ToInt64Milliseconds(r.elapsed)},
      {"detail", r.detail},
      {"errno", r.error_code},
      {"explain", r.Explain()},
  };
  if (r.icmp_type >= 0) {
    j["icmp"] = {{"type", r.icmp_type},
                 {"code", r.icmp_code},
                 {"v6", r.icmp_v6},
                 {"from", r.icmp_source},
                 {"from_this_host", r.icmp_from_this_host}};
  } else {
    j["icmp"] = nullptr;
  }
  return j;
}

std::string ShortOutcome(const ProbeResult& r) {
  const std::string ms =
      absl::StrCat(absl::ToInt64Milliseconds(r.elapsed), " ms");
  switch (r.outcome) {
    case ProbeOutcome::kOpen:
      return absl::StrCat("open: accepts connections (", ms, ")");
    case ProbeOutcome::kRefused:
      return absl::StrCat("refused: the host is up, nothing listens on port ",
                          r.port);
    case ProbeOutcome::kFiltered:
      if (absl::StrContains(r.detail, "answered ARP")) {
        return absl::StrCat(
            "filtered: the host is up but a firewall drops TCP ", r.port,
            " (no answer in ", ms, ")");
      }
      return absl::StrCat("filtered: no answer in ", ms,
                          " - a firewall DROP, a security group, a wrong "
                          "address or a host that is down");
    case ProbeOutcome::kRejected:
      if (r.icmp_type < 0) {
        return "rejected: refused by this host before sending";
      }
      return absl::StrCat("rejected: a firewall REJECT rule (",
                          absl::StrContains(r.detail, "ICMP")
                              ? r.detail.substr(r.detail.find("ICMP"))
                              : r.detail,
                          ")");
    case ProbeOutcome::kUnreachable:
      return absl::StrCat("unreachable: ", r.detail);
    case ProbeOutcome::kDnsFailure:
      return absl::StrCat("dns failure: '", r.host, "' does not resolve (",
                          r.detail, ")");
    case ProbeOutcome::kError:
      return absl::StrCat("error: ", r.detail);
  }
  return "";
}

}  // namespace

Check TargetCheck(const Target& t, bool local, const ProbeResult& r,
                  const std::string& os,
                  const std::vector<platform::TcpSocket>& sockets) {
  Check c;
  c.id = t.id;
  c.title = t.title;
  c.summary = ShortOutcome(r);
  c.data = ProbeJson(r);
  c.evidence.push_back(r.Explain());
  c.evidence.push_back(absl::StrCat(
      "probe: ",
      r.resolved_address.empty() ? "(no address)" : r.resolved_address,
      " port ", r.port, ", ", absl::ToInt64Milliseconds(r.elapsed), " ms, ",
      r.detail));
  switch (r.outcome) {
    case ProbeOutcome::kOpen:
      c.status = Status::kPass;
      if (local) {
        for (const platform::TcpSocket& s : SocketsOn(sockets, t.hp.port)) {
          if (s.state == "LISTEN" && s.pid > 0) {
            c.evidence.push_back(absl::StrCat("listening here: pid ", s.pid,
                                              " (", s.command, ") on ",
                                              s.local));
            break;
          }
        }
      }
      return c;
    case ProbeOutcome::kRefused:
      // A local endpoint with nothing on it is served by the agent started
      // here (torchrun's is_host); a remote one must be running.
      c.status = t.id == "endpoint" && !local ? Status::kFail : Status::kWarn;
      if (t.id == "endpoint" && local) {
        c.evidence.push_back(
            "the endpoint is this host: a muster agent started here embeds "
            "the rendezvous server when nothing listens (is_host); other "
            "nodes' agents fail until it does");
      }
      if (t.id != "endpoint") {
        c.evidence.push_back(
            "the path is open (a reset came back, so no firewall dropped the "
            "SYN); a master or peer port is only served while a job runs");
      }
      if (local) {
        for (const platform::TcpSocket& s : SocketsOn(sockets, t.hp.port)) {
          if (s.state == "LISTEN") {
            c.evidence.push_back(absl::StrCat(
                "on this host port ", t.hp.port, " is served on ", s.local,
                s.pid > 0
                    ? absl::StrCat(" by pid ", s.pid, " (", s.command, ")")
                    : "",
                ", not on ", r.resolved_address));
          }
        }
      }
      c.fix.push_back(r.Fix());
      if (t.id == "endpoint") {
        c.commands.push_back(
            absl::StrCat("musterd --listen=0.0.0.0:", t.hp.port, "   # on ",
                         local ? "this host" : t.hp.host));
      }
      return c;
    case ProbeOutcome::kFiltered:
    case ProbeOutcome::kRejected: {
      c.status = Status::kFail;
      c.fix.push_back(r.Fix());
      const bool here = local || r.icmp_from_this_host;
      c.fix.push_back(absl::StrCat(
          here ? "On this host" : absl::StrCat("On ", t.hp.host),
          os == "windows" ? ", in an elevated prompt:"
                          : ", as root, with the firewall it runs:"));
      for (const std::string& cmd :
           OpenPortCommands(os, "", {{t.hp.port, t.hp.port}})) {
        c.commands.push_back(cmd);
      }
      return c;
    }
    case ProbeOutcome::kUnreachable:
    case ProbeOutcome::kDnsFailure:
    case ProbeOutcome::kError:
      c.status = Status::kFail;
      c.fix.push_back(r.Fix());
      return c;
  }
  return c;
}

}  // namespace muster::doctor
