#include "tests/testing/rendezvous.h"

#include <utility>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace muster::testing {

std::shared_ptr<grpc::Channel> LoopbackChannel(int port) {
  return grpc::CreateChannel(LoopbackEndpoint(port),
                             grpc::InsecureChannelCredentials());
}

LoopbackService ServeOnLoopback(grpc::Service* service) {
  LoopbackService out;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &out.port);
  builder.RegisterService(service);
  out.server = builder.BuildAndStart();
  out.endpoint = LoopbackEndpoint(out.port);
  return out;
}

std::unique_ptr<rendezvous::RendezvousServer> StartLoopbackServer(
    rendezvous::ServerOptions options) {
  options.listen = "127.0.0.1:0";
  auto server = rendezvous::RendezvousServer::Start(std::move(options));
  if (!server.ok()) {
    ADD_FAILURE() << "RendezvousServer on 127.0.0.1:0: " << server.status();
    return nullptr;
  }
  return *std::move(server);
}

std::unique_ptr<rendezvous::RendezvousServer> StartLoopbackServer() {
  return StartLoopbackServer(rendezvous::ServerOptions());
}

void PrepareContext(grpc::ClientContext* context, const std::string& token,
                    absl::Duration timeout) {
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::StatusOr<v1::ServerMessage> NextOfKind(
    rendezvous::RendezvousClient& client, v1::ServerMessage::KindCase kind,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::ServerMessage> msg = client.Next(deadline - absl::Now());
    if (!msg.ok() || msg->kind_case() == kind) return msg;
  }
}

RawSession::RawSession(std::shared_ptr<grpc::Channel> channel,
                       const std::string& token, absl::Duration timeout)
    : stub_(v1::Rendezvous::NewStub(std::move(channel))) {
  PrepareContext(&context_, token, timeout);
  stream_ = stub_->Session(&context_);
}

grpc::Status RawSession::Finish(int* messages) {
  v1::ServerMessage msg;
  int n = 0;
  while (stream_->Read(&msg)) ++n;
  if (messages != nullptr) *messages = n;
  return stream_->Finish();
}

}  // namespace muster::testing
