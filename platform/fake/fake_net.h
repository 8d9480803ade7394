// In-memory Net and ToolRunner for tests: every fact is a public field that
// the test fills by hand. Thread-safe for reads once filled (tests fill them
// before handing the fake out).
#ifndef MUSTER_PLATFORM_FAKE_FAKE_NET_H_
#define MUSTER_PLATFORM_FAKE_FAKE_NET_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "muster/platform/net.h"
#include "muster/platform/tool_runner.h"

namespace muster::platform {

// One interface address as a test writes it: IPv6 when `address` holds a
// ':', loopback when it is a loopback address.
InterfaceAddress FakeInterface(const std::string& name,
                               const std::string& address, int prefix_len,
                               bool up = true, bool running = true);

class FakeNet : public Net {
 public:
  std::vector<InterfaceAddress> interfaces;
  std::string hostname = "fakehost";
  // Names and numeric addresses; a host not listed fails as EAI_NONAME.
  std::map<std::string, Resolution> resolutions;
  std::map<std::string, std::string> routes;  // peer address -> source
  std::vector<TcpSocket> sockets;
  std::map<int, int> bind_errors;  // port -> errno; absent: free
  std::map<std::string, int> address_bind_errors;  // address -> errno
  int next_free_port = 40000;
  // "address:port" -> attempt; absent: refused (ECONNREFUSED).
  std::map<std::string, ConnectAttempt> connects;

  // Adds an interface address; IPv6 when `address` holds a ':'.
  FakeNet& AddInterface(const std::string& name, const std::string& address,
                        int prefix_len, bool up = true, bool running = true);

  std::vector<InterfaceAddress> Interfaces() override { return interfaces; }
  std::string Hostname() override { return hostname; }
  Resolution Resolve(const std::string& host, absl::Duration timeout) override;
  std::string RouteSource(const std::string& address) override;
  std::vector<TcpSocket> TcpSockets(const std::vector<int>& ports) override;
  int TryBind(const std::string& address, int port,
              bool reuse_address) override;
  absl::StatusOr<int> PickFreePort(const std::string& host) override;
  ConnectAttempt Connect(const std::string& address, int port,
                         absl::Time deadline) override;
};

class FakeToolRunner : public ToolRunner {
 public:
  // "iptables -S" (argv joined by spaces) -> its result; absent: not found.
  std::map<std::string, ToolResult> results;
  std::vector<std::string> ran;  // what was asked, in order

  // Records that `command` prints `output` and exits `exit_code`.
  void Set(const std::string& command, std::string output, int exit_code = 0) {
    ToolResult r;
    r.found = true;
    r.exit_code = exit_code;
    r.output = std::move(output);
    r.path = "/usr/sbin/" + command.substr(0, command.find(' '));
    results[command] = std::move(r);
  }

  ToolResult Run(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>&,
                 absl::Duration) override {
    const std::string key = absl::StrJoin(argv, " ");
    ran.push_back(key);
    auto it = results.find(key);
    return it == results.end() ? ToolResult{} : it->second;
  }
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_FAKE_FAKE_NET_H_
