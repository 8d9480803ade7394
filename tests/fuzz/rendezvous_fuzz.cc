// Fuzz target: musterd's request handling below the (thin) gRPC adapters.
// The input is a program of agent events (Join with fields chosen or raw
// proto bytes, heartbeats, failure and success reports, preflight, leave,
// disconnect), clock advances with Tick, status queries, and Store operations
// against a KvStore with small limits. Checked after each step: nothing
// crashes (ASan/UBSan in the fuzz build), every RoundReady is consistent
// (0 <= group_rank < group_world_size, rank_offset + local ranks within a
// positive world size), no message is sent on a closed stream, and the
// Store's quotas hold.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/store/kv_store.h"
#include "rendezvous/src/core/status_page.h"
#include "tests/fuzz/fuzz_input.h"

namespace muster::fuzz {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rendezvous_fuzz: check failed: %s\n", what);
    std::abort();
  }
}

class CheckingChannel : public rendezvous::AgentChannel {
 public:
  void Send(const v1::ServerMessage& msg) override {
    Check(!closed_, "a message was sent on a closed stream");
    if (msg.has_round_ready()) {
      const v1::RoundReady& r = msg.round_ready();
      Check(r.world_size() > 0, "RoundReady world_size > 0");
      Check(r.group_world_size() > 0, "RoundReady group_world_size > 0");
      Check(r.group_rank() >= 0 && r.group_rank() < r.group_world_size(),
            "RoundReady group_rank in range");
      Check(r.rank_offset() >= 0 && r.rank_offset() < r.world_size(),
            "RoundReady rank_offset in range");
      Check(r.group_world_size() <= r.world_size(),
            "RoundReady: at least one rank per node");
    }
  }
  void Close(const absl::Status&) override { closed_ = true; }
  bool closed() const { return closed_; }

 private:
  bool closed_ = false;
};

std::string PickId(FuzzInput& in, const char* stem, int choices) {
  // Mostly a few well-formed ids (so jobs fill up and rounds form), sometimes
  // arbitrary bytes (the id grammar).
  if (in.Byte() % 16 == 0) return in.Bytes(200);
  return absl::StrCat(stem, in.Below(choices));
}

v1::Join MakeJoin(FuzzInput& in) {
  v1::Join j;
  if (in.Byte() % 8 == 0) {
    const std::string raw = in.Bytes(255);
    (void)j.ParseFromString(raw);  // Whatever parses, even partly.
    return j;
  }
  j.set_job_id(PickId(in, "job", 3));
  j.set_node_id(PickId(in, "node", 6));
  j.set_hostname(absl::StrCat("host", in.Below(4)));
  j.set_advertised_addr("127.0.0.1");
  const uint8_t shape = in.Byte();
  j.set_local_world_size(shape % 32 == 0 ? static_cast<int32_t>(in.U32())
                                         : 1 + shape % 4);
  const int32_t min_nodes = 1 + in.Below(3);
  j.set_min_nodes(in.Byte() % 32 == 0 ? static_cast<int32_t>(in.U32())
                                      : min_nodes);
  j.set_max_nodes(in.Byte() % 32 == 0 ? static_cast<int32_t>(in.U32())
                                      : min_nodes + in.Below(3));
  j.set_max_restarts(static_cast<int32_t>(in.Below(3)) - (in.Byte() % 32 == 0));
  j.set_node_rank_hint(static_cast<int32_t>(in.Below(5)) - 1);
  j.set_master_port(29500);
  j.set_last_call_timeout_ms(in.Below(3) * 1000);
  j.set_join_timeout_ms(in.Below(3) * 10000);
  j.set_heartbeat_timeout_ms(in.Below(3) * 1000);
  return j;
}

}  // namespace
}  // namespace muster::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace muster;
  using namespace muster::fuzz;
  static const bool quiet = [] {
    SetMinLogLevel(LogLevel::kError);
    return true;
  }();
  (void)quiet;
  FuzzInput in(data, size);
  FakeClock clock;
  rendezvous::CoordinatorOptions options;
  options.max_finished_jobs = 4;
  rendezvous::Coordinator coord(options, &clock);
  store::KvStoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_namespace_keys = 16;
  limits.max_namespace_bytes = 2048;
  store::KvStore kv(limits);
  // Eight agents' streams. As in the gRPC adapter, a stream the server
  // closed (or that failed its Join) ends: the adapter reports the disconnect,
  // and the agent's next stream has a new id (ids are never reused).
  struct Stream {
    rendezvous::ConnectionId id = 0;
    std::shared_ptr<CheckingChannel> channel;
  };
  Stream streams[8];
  rendezvous::ConnectionId next_conn = 1;
  for (Stream& s : streams) {
    s.id = next_conn++;
    s.channel = std::make_shared<CheckingChannel>();
  }
  auto end_stream = [&](Stream& s) {
    coord.OnDisconnect(s.id);
    s.id = next_conn++;
    s.channel = std::make_shared<CheckingChannel>();
  };
  for (int step = 0; step < 300 && !in.empty(); ++step) {
    const uint8_t op = in.Byte() % 14;
    Stream& stream = streams[in.Byte() % 8];
    if (stream.channel->closed()) end_stream(stream);
    const rendezvous::ConnectionId conn = stream.id;
    switch (op) {
      case 0:
      case 1: {
        if (!coord.OnJoin(conn, MakeJoin(in), stream.channel).ok()) {
          end_stream(stream);  // The adapter ends the stream with the error.
        }
        break;
      }
      case 2: {
        v1::Heartbeat hb;
        hb.set_round(in.Below(5));
        coord.OnHeartbeat(conn, hb);
        break;
      }
      case 3: {
        v1::WorkersFailed f;
        f.set_round(in.Below(5));
        const int n = in.Below(3);
        for (int i = 0; i < n; ++i) {
          v1::WorkerFailure* w = f.add_failures();
          w->set_node_id(PickId(in, "node", 6));
          w->set_global_rank(static_cast<int32_t>(in.U32()));
          w->set_exit_code(static_cast<int32_t>(in.U32()));
          w->set_signal(in.Below(70));
          w->set_error_message(in.Bytes(64));
          w->set_timestamp_unix_ms(static_cast<int64_t>(in.U32()) * 1000);
        }
        coord.OnWorkersFailed(conn, f);
        break;
      }
      case 4: {
        v1::WorkersSucceeded s;
        s.set_round(in.Below(5));
        coord.OnWorkersSucceeded(conn, s);
        break;
      }
      case 5: {
        v1::PreflightFailed p;
        p.set_round(in.Below(5));
        p.set_peer_node_id(PickId(in, "node", 6));
        p.set_port(static_cast<int32_t>(in.U32()));
        p.set_outcome(in.Bytes(16));
        coord.OnPreflightFailed(conn, p);
        break;
      }
      case 6: {
        v1::Leave l;
        l.set_reason(in.Bytes(32));
        coord.OnLeave(conn, l);
        break;
      }
      case 7:
        end_stream(stream);
        break;
      case 8:
        clock.Advance(absl::Milliseconds(in.Below(700000)));
        (void)coord.Tick();
        break;
      case 9: {
        v1::GetStatusResponse s = coord.Status(in.Byte() % 2 ? "" : "job0");
        for (const v1::JobStatus& j : s.jobs()) {
          Check(!j.state().empty(), "status has a state");
          Check(j.members_size() <= j.max_nodes(), "members within max");
        }
        // A page (issue 11): bounded, in id order after the token, counted.
        v1::GetStatusRequest r;
        r.set_page_size(static_cast<int32_t>(in.Below(4)));
        if (in.Byte() % 2) r.set_page_token(in.Bytes(16));
        if (in.Byte() % 2)
          r.set_page_token(rendezvous::StatusPageTokenAfter("job1"));
        absl::StatusOr<rendezvous::StatusPageQuery> q =
            rendezvous::StatusPageQueryOf(r);
        if (!q.ok()) break;
        v1::GetStatusResponse page = coord.StatusPage(*q);
        Check(page.jobs_size() <= q->page_size, "page within page_size");
        Check(page.total_jobs() >= page.jobs_size(), "total counts the page");
        std::string last = q->after;
        for (const v1::JobStatus& j : page.jobs()) {
          Check(j.job_id() > last, "page in id order after the token");
          last = j.job_id();
        }
        break;
      }
      default: {
        const std::string ns = absl::StrCat("job", in.Below(3), "/1");
        const std::string key = in.Byte() % 8 == 0
                                    ? in.Bytes(100)
                                    : absl::StrCat("k", in.Below(20));
        switch (op) {
          case 10:
            (void)kv.Set(ns, key, in.Bytes(255));
            break;
          case 11:
            (void)kv.Add(ns, key, static_cast<int32_t>(in.U32()));
            break;
          case 12:
            (void)kv.CompareSet(ns, key, in.Bytes(4), in.Bytes(255));
            break;
          default:
            if (in.Byte() % 4 == 0) {
              kv.DropNamespace(ns);
            } else {
              (void)kv.Delete(ns, key);
            }
        }
        Check(kv.NumKeys(ns) <= limits.max_namespace_keys,
              "the key quota holds");
      }
    }
    Check(coord.ConnectedAgents() >= 0, "connected agents >= 0");
  }
  return 0;
}
