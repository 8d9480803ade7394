// Small helpers the checks share (private to doctor/).
#ifndef MUSTER_DOCTOR_SRC_UTIL_H_
#define MUSTER_DOCTOR_SRC_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "muster/doctor/interfaces.h"
#include "nlohmann/json.hpp"

namespace muster::doctor::internal {

std::string Lower(absl::string_view s);
// The value of `key` in `env`; nullptr / "" when absent.
const std::string* Find(const std::map<std::string, std::string>& env,
                        const std::string& key);
std::string Get(const std::map<std::string, std::string>& env,
                const std::string& key);
// Splits on whitespace, keeping "double quoted" words (with \" inside) whole.
std::vector<std::string> Tokenize(absl::string_view line);
// Wraps `text` to `width` columns; the first line starts after `first_len`
// columns already printed, the others with `indent`.
std::string Wrap(absl::string_view text, size_t first_len,
                 const std::string& indent, size_t width);
// Whether a rule's address match names loopback only: "127.x", "::1".
bool IsLoopbackNet(absl::string_view v);
// The first line of `text`, trimmed.
std::string FirstLine(absl::string_view text);

// "eth0 10.0.0.5"; a comma list of those.
std::string Describe(const InterfaceAddress& a);
std::string DescribeAll(const std::vector<InterfaceAddress>& v);
nlohmann::json ChoiceJson(const InterfaceChoice& c);
// The first IPv4 interface that is up and not loopback; "" when none.
std::string FirstNonLoopbackInterface(const std::vector<InterfaceAddress>& a);

// The sockets on local TCP `port`.
std::vector<platform::TcpSocket> SocketsOn(
    const std::vector<platform::TcpSocket>& sockets, int port);

// Commands in the target OS's shell (bash on linux, PowerShell on windows).
// Sets each variable to `value` for the programs started from this shell.
std::string ExportCommand(const std::string& os,
                          const std::vector<std::string>& variables,
                          const std::string& value);
std::string UnsetCommand(const std::string& os,
                         const std::vector<std::string>& variables);
std::string KillCommand(const std::string& os, int pid);

}  // namespace muster::doctor::internal

#endif  // MUSTER_DOCTOR_SRC_UTIL_H_
