// Helpers for tests that talk to the rendezvous over gRPC: a real
// RendezvousServer on loopback, "the next message of this kind" with a
// deadline, raw calls and streams as a client without muster's code makes
// them. (The Join builder is in join.h.)
#ifndef MUSTER_TESTS_TESTING_RENDEZVOUS_H_
#define MUSTER_TESTS_TESTING_RENDEZVOUS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/join.h"   // MakeJoin
#include "tests/testing/ports.h"  // LoopbackEndpoint

namespace muster::testing {

// A plaintext gRPC channel to 127.0.0.1:<port>.
std::shared_ptr<grpc::Channel> LoopbackChannel(int port);

// A plaintext gRPC server on 127.0.0.1 serving a fake musterd, on a port the
// kernel picks.
struct LoopbackService {
  // nullptr when it did not start: callers ASSERT_NE(fake.server, nullptr).
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string endpoint;  // "127.0.0.1:<port>"
};
LoopbackService ServeOnLoopback(grpc::Service* service);

// A RendezvousServer started with `options` on 127.0.0.1 and a port the
// kernel picks (options.listen is replaced). On failure adds a test failure
// naming the status and returns nullptr: callers ASSERT_NE(server, nullptr).
std::unique_ptr<rendezvous::RendezvousServer> StartLoopbackServer(
    rendezvous::ServerOptions options);
// The same with default options. An overload, not a default argument: a
// `= {}` temporary in every caller, destroyed there after the call, made
// MinGW g++ 12 at -O3 call its std::function members "maybe uninitialized"
// (-Werror, the Windows build).
std::unique_ptr<rendezvous::RendezvousServer> StartLoopbackServer();

// The next message of `kind` from the client, skipping others (Waiting, ...),
// within one deadline `timeout` from now. Errors: the client's (its stream
// ended, or DEADLINE_EXCEEDED when nothing of that kind came in time).
absl::StatusOr<v1::ServerMessage> NextOfKind(
    rendezvous::RendezvousClient& client, v1::ServerMessage::KindCase kind,
    absl::Duration timeout = absl::Seconds(10));

// Sets a deadline `timeout` from now on context and, when token is not empty,
// the "authorization: Bearer <token>" header, as an agent sends it.
void PrepareContext(grpc::ClientContext* context, const std::string& token = "",
                    absl::Duration timeout = absl::Seconds(10));

// One unary call through a generated stub (a raw client, as one without
// muster's code would make it) with a context from PrepareContext; the response
// is dropped. Returns the call's status. Blocks up to timeout.
//   CallUnary(*stub, &v1::Store::Stub::Get, request, token)
template <typename Stub, typename Request, typename Response>
grpc::Status CallUnary(Stub& stub,
                       grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                    const Request&, Response*),
                       const Request& request, const std::string& token = "",
                       absl::Duration timeout = absl::Seconds(10)) {
  grpc::ClientContext context;
  PrepareContext(&context, token, timeout);
  Response response;
  return (stub.*method)(&context, request, &response);
}

// A Session stream opened through a raw stub on `channel` (as a client
// without muster's code, or a hostile one, would open it), with a context from
// PrepareContext(token, timeout). Not thread-safe.
class RawSession {
 public:
  explicit RawSession(std::shared_ptr<grpc::Channel> channel,
                      const std::string& token = "",
                      absl::Duration timeout = absl::Seconds(10));
  grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>& stream() {
    return *stream_;
  }
  // Reads (and drops) what the server sends until it ends the stream, then
  // returns the stream's status; *messages, when given, gets how many came.
  // Does not half-close: call stream().WritesDone() first for that. Blocks up
  // to the context's deadline.
  grpc::Status Finish(int* messages = nullptr);

 private:
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>>
      stream_;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_RENDEZVOUS_H_
