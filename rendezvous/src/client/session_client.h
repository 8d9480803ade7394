// The Session stream to one musterd (rendezvous/src/client/client.cc), as the
// client that follows the leader among replicas
// (rendezvous/src/client/replica_client.cc) uses it: besides RendezvousClient,
// the leader a standby named when it refused the Join, and an abandon that does
// not wait for a frozen server.
#ifndef MUSTER_RENDEZVOUS_SRC_SESSION_CLIENT_H_
#define MUSTER_RENDEZVOUS_SRC_SESSION_CLIENT_H_

#include <memory>
#include <string>

#include "muster/rendezvous/client.h"
#include "muster/store/grpc_status.h"

namespace muster::rendezvous {

// Thread-safe, as RendezvousClient.
class SessionClient : public RendezvousClient {
 public:
  // The leader (HOST:PORT) that the server named in the trailing metadata
  // `muster-leader` when it ended the stream (a standby replica's refusal);
  // empty while the stream is open or when it named none.
  virtual std::string leader() const = 0;
  // Ends the stream at once, without Leave or a half-close and without
  // waiting for the server (a silent one would never answer); the server
  // sees the connection's call cancelled when it next runs. Idempotent;
  // joins the client's threads.
  virtual void Abandon() = 0;
};

// The Session client to the one musterd at options.endpoint (a single
// HOST:PORT). `wait`: how Start waits for the channel (kPatient: through
// refusals for the whole connect_timeout, an agent started before musterd;
// kFailFast: a refused or unresolvable replica fails at once, so that the
// next one is tried).
std::unique_ptr<SessionClient> NewSessionClient(GrpcClientOptions options,
                                                store::ChannelWait wait);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_SESSION_CLIENT_H_
