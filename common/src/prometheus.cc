// Prometheus text-format helpers (declared in http_server.h, which serves
// /metrics). Portable: the metrics text is built on every OS, served where
// the HTTP endpoint is built.
#include <string>

#include "muster/common/http_server.h"

namespace muster {

std::string PrometheusLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace muster
