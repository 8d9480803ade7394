// HttpRequest's accessors and HttpServer's route lookup: portable, shared by
// the civetweb server and the Windows stand-in.
#include <cctype>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "muster/common/http_server.h"

namespace muster {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded: '+' is a space, %XX a byte; a malformed
// escape stays as written (a query is user input, not a reason to fail).
std::string FormDecode(absl::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out.push_back(' ');
    } else if (in[i] == '%' && i + 2 < in.size() && HexValue(in[i + 1]) >= 0 &&
               HexValue(in[i + 2]) >= 0) {
      out.push_back(
          static_cast<char>(HexValue(in[i + 1]) * 16 + HexValue(in[i + 2])));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

}  // namespace

std::string HttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::string HttpRequest::QueryParam(const std::string& name) const {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    const size_t eq = pair.find('=');
    const absl::string_view key = pair.substr(0, eq);
    if (FormDecode(key) != name) continue;
    return eq == absl::string_view::npos ? std::string()
                                         : FormDecode(pair.substr(eq + 1));
  }
  return "";
}

}  // namespace muster
