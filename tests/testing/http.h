// A plain HTTP/1.1 GET (and one over TLS) on loopback, for tests of musterd's
// and the agent's /healthz, /readyz and /metrics.
#ifndef MUSTER_TESTS_TESTING_HTTP_H_
#define MUSTER_TESTS_TESTING_HTTP_H_

#include <string>

namespace muster::testing {

// The whole response (status line, headers, body) of GET `path` at
// 127.0.0.1:`port`, or "" when nothing answered. Waits at most 5 s for data.
// `headers`: more request header lines, each ending in "\r\n".
std::string HttpGet(int port, const std::string& path,
                    const std::string& headers = "");

// The same over TLS: the server's certificate must verify against the PEM CA
// file `ca` for the IP address 127.0.0.1. "" when nothing answered; on a
// failed connect or handshake "TLS error: " and OpenSSL's reason. Waits at
// most 5 s for each read.
std::string HttpsGet(int port, const std::string& path, const std::string& ca,
                     const std::string& headers = "");

// The status code of a response HttpGet returned (0 when none).
int HttpStatusCode(const std::string& response);
// The body of a response HttpGet returned (after the blank line).
std::string HttpBody(const std::string& response);

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_HTTP_H_
