#include "muster/common/net.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "muster/platform/net.h"

namespace muster {

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos)
    return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, int default_port,
                                       bool allow_zero_port) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  HostPort hp;
  absl::string_view port_text;
  bool has_port = false;
  if (absl::ConsumePrefix(&t, "[")) {
    size_t close = t.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address '", text, "' has '[' without ']'; write [IPv6]:PORT"));
    }
    hp.host = std::string(t.substr(0, close));
    absl::string_view rest = t.substr(close + 1);
    if (absl::ConsumePrefix(&rest, ":")) {
      port_text = rest;
      has_port = true;
    } else if (!rest.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "' is malformed"));
    }
  } else {
    size_t colon = t.rfind(':');
    if (colon != absl::string_view::npos && t.find(':') != colon) {
      // Several colons and no brackets: a bare IPv6 address.
      hp.host = std::string(t);
    } else if (colon != absl::string_view::npos) {
      hp.host = std::string(t.substr(0, colon));
      port_text = t.substr(colon + 1);
      has_port = true;
    } else {
      hp.host = std::string(t);
    }
  }
  if (has_port) {
    int port = 0;
    if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535 ||
        (port == 0 && !allow_zero_port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "' has port '", port_text,
                       "'; a port is a number in 1..65535"));
    }
    hp.port = port;
  } else {
    if (default_port < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "' has no port; write HOST:PORT"));
    }
    hp.port = default_port;
  }
  return hp;
}

absl::StatusOr<std::vector<HostPort>> ParseHostPortList(absl::string_view text,
                                                        int default_port) {
  std::vector<HostPort> out;
  const std::vector<absl::string_view> items = absl::StrSplit(text, ',');
  for (size_t k = 0; k < items.size(); ++k) {
    absl::string_view item = absl::StripAsciiWhitespace(items[k]);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "': entry ", k + 1,
                       " is empty; list the replicas as HOST:PORT,HOST:PORT"));
    }
    absl::StatusOr<HostPort> hp = ParseHostPort(item, default_port);
    if (!hp.ok()) {
      if (items.size() == 1) return hp.status();
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': entry ", k + 1, ": ", hp.status().message()));
    }
    if (items.size() > 1 && hp->host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': entry ", k + 1, " ('", item,
          "') has no host; in a list of replicas each entry is HOST:PORT"));
    }
    for (const HostPort& seen : out) {
      if (seen.host == hp->host && seen.port == hp->port) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", text, "': ", hp->ToString(),
                         " is listed twice; list each replica once"));
      }
    }
    out.push_back(*std::move(hp));
  }
  return out;
}

std::string JoinHostPorts(const std::vector<HostPort>& list) {
  std::string out;
  for (const HostPort& hp : list) {
    if (!out.empty()) out.push_back(',');
    out += hp.ToString();
  }
  return out;
}

std::string LocalHostname() { return platform::SystemNet().Hostname(); }

bool IsLocalHost(absl::string_view host_view) {
  platform::Net& net = platform::SystemNet();
  std::string host = absl::AsciiStrToLower(host_view);
  if (host.empty() || host == "localhost" ||
      host == absl::AsciiStrToLower(net.Hostname())) {
    return true;
  }
  const platform::Resolution r = net.Resolve(host, absl::InfiniteDuration());
  if (!r.ok) return false;
  const std::vector<platform::InterfaceAddress> local = net.Interfaces();
  for (const std::string& addr : r.addresses) {
    if (platform::IsLoopbackAddress(addr)) return true;
    for (const platform::InterfaceAddress& l : local) {
      if (l.address == addr) return true;
    }
  }
  return false;
}

std::string DefaultAdvertisedAddress() {
  for (const platform::InterfaceAddress& i :
       platform::SystemNet().Interfaces()) {
    if (i.family != platform::IpFamily::kIpv4 || !i.up || i.loopback) continue;
    if (platform::IsLoopbackAddress(i.address)) continue;
    return i.address;
  }
  return "127.0.0.1";
}

absl::StatusOr<int> PickFreePort(const std::string& host) {
  return platform::SystemNet().PickFreePort(host);
}

bool CanConnect(const std::string& host, int port, absl::Duration timeout) {
  platform::Net& net = platform::SystemNet();
  const platform::Resolution r = net.Resolve(host, absl::InfiniteDuration());
  if (!r.ok) return false;
  for (const std::string& addr : r.addresses) {
    if (net.Connect(addr, port, absl::Now() + timeout).connected) return true;
  }
  return false;
}

std::string DescribePortOwner(int port) {
  for (const platform::TcpSocket& s :
       platform::SystemNet().TcpSockets({port})) {
    if (s.state != "LISTEN" || s.pid <= 0) continue;
    return absl::StrCat("pid ", s.pid, " (", s.command, ")");
  }
  return "";
}

}  // namespace muster
