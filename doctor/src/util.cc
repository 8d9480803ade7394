#include "doctor/src/util.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace muster::doctor::internal {

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

const std::string* Find(const std::map<std::string, std::string>& env,
                        const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& key) {
  const std::string* v = Find(env, key);
  return v == nullptr ? "" : *v;
}

// Splits on whitespace, keeping "double quoted" words (with \" inside) whole.
std::vector<std::string> Tokenize(absl::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool in_quotes = false;
  bool have = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_quotes) {
      if (c == '\\' && i + 1 < line.size()) {
        cur += line[++i];
      } else if (c == '"') {
        in_quotes = false;
      } else {
        cur += c;
      }
      continue;
    }
    if (c == '"') {
      in_quotes = true;
      have = true;
      continue;
    }
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
      continue;
    }
    cur += c;
    have = true;
  }
  if (have) out.push_back(cur);
  return out;
}

// Wraps `text` to `width` columns; the first line starts after `first`
// (already printed, `first_len` wide), the others with `indent`.
std::string Wrap(absl::string_view text, size_t first_len,
                 const std::string& indent, size_t width) {
  std::string out;
  size_t col = first_len;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && col + 1 + word.size() > width) {
      absl::StrAppend(&out, "\n", indent);
      col = indent.size();
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    absl::StrAppend(&out, word);
    col += word.size();
    line_empty = false;
  }
  return out;
}

bool IsLoopbackNet(absl::string_view v) {
  return absl::StartsWith(v, "127.") || v == "::1" || v == "::1/128";
}

std::string FirstLine(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  return std::string(text.substr(0, text.find('\n')));
}

std::string Describe(const InterfaceAddress& a) {
  return absl::StrCat(a.name, " ", a.address);
}

std::string DescribeAll(const std::vector<InterfaceAddress>& v) {
  std::vector<std::string> parts;
  for (const auto& a : v) parts.push_back(Describe(a));
  return absl::StrJoin(parts, ", ");
}

nlohmann::json ChoiceJson(const InterfaceChoice& c) {
  nlohmann::json chosen = nlohmann::json::array();
  for (const InterfaceAddress& a : c.chosen) {
    chosen.push_back({{"interface", a.name}, {"address", a.address}});
  }
  return {{"chosen", chosen}, {"rule", c.rule}, {"error", c.error}};
}

std::string FirstNonLoopbackInterface(
    const std::vector<InterfaceAddress>& addrs) {
  for (const InterfaceAddress& a : addrs) {
    if (a.family == IpFamily::kIpv4 && a.up && !a.loopback) return a.name;
  }
  return "";
}

std::vector<platform::TcpSocket> SocketsOn(
    const std::vector<platform::TcpSocket>& sockets, int port) {
  std::vector<platform::TcpSocket> out;
  for (const platform::TcpSocket& s : sockets) {
    if (s.local_port == port) out.push_back(s);
  }
  return out;
}

std::string ExportCommand(const std::string& os,
                          const std::vector<std::string>& variables,
                          const std::string& value) {
  std::vector<std::string> parts;
  for (const std::string& v : variables) {
    parts.push_back(os == "windows"
                        ? absl::StrCat("$env:", v, "=\"", value, "\"")
                        : absl::StrCat(v, "=", value));
  }
  return os == "windows" ? absl::StrJoin(parts, "; ")
                         : absl::StrCat("export ", absl::StrJoin(parts, " "));
}

std::string UnsetCommand(const std::string& os,
                         const std::vector<std::string>& variables) {
  if (os != "windows")
    return absl::StrCat("unset ", absl::StrJoin(variables, " "));
  std::vector<std::string> parts;
  for (const std::string& v : variables)
    parts.push_back(absl::StrCat("Env:", v));
  return absl::StrCat("Remove-Item ", absl::StrJoin(parts, ", "));
}

std::string KillCommand(const std::string& os, int pid) {
  return os == "windows" ? absl::StrCat("Stop-Process -Id ", pid)
                         : absl::StrCat("kill ", pid);
}

}  // namespace muster::doctor::internal
