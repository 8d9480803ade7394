// muster-store-bench: Store service throughput from many concurrent clients.
// Each client issues one operation at a time (as a worker bootstrapping Gloo
// does), the next as soon as the last answered; the clients share a few HTTP/2
// connections, driven by gRPC's callback API from one process.
//
//   muster-store-bench --endpoint=127.0.0.1:29400 --clients=1000 --op=set
//                      [--seconds=5] [--value-bytes=64] [--mode=stream|unary]
//
// --mode=stream (the default, as GrpcStore talks): the clients' ops go over
// one Store.Stream per connection, batched per write as GrpcStore batches
// them. --mode=unary: one unary call per op (the older protocol).
//
// Prints `op=set clients=1000 ops=N seconds=S ops_per_s=X p50_us=.. p99_us=..`.
// set: each client sets its own keys (k<client>-<i>); get: each client reads a
// key set beforehand (no wait); add: every client adds 1 to one shared counter
// (the contended case, as a barrier's counter). bench/store.sh compares it
// with torch's TCPStore.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/v1/store.grpc.pb.h"

namespace muster::storebench {
namespace {

class Client;

// One Store.Stream shared by many clients: their requests queue while a write
// is in flight and go out together in the next (as GrpcStore sends them).
class StreamDriver final
    : public grpc::ClientBidiReactor<v1::StoreRequests, v1::StoreResponses> {
 public:
  explicit StreamDriver(v1::Store::Stub* stub) {
    stub->async()->Stream(&context_, this);
    StartRead(&in_);
    StartCall();
  }
  void Submit(v1::StoreRequest request, Client* client) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = next_id_++;
    request.set_id(id);
    waiting_.emplace(id, client);
    *queue_.add_requests() = std::move(request);
    MaybeWriteLocked();
  }
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ok) MaybeWriteLocked();
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    done_ = true;
    final_ = status;
  }
  void Cancel() { context_.TryCancel(); }
  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || queue_.requests_size() == 0) return;
    out_.Swap(&queue_);
    queue_.Clear();
    writing_ = true;
    StartWrite(&out_);
  }

  grpc::ClientContext context_;
  v1::StoreResponses in_;
  absl::Mutex mu_;
  v1::StoreRequests queue_ ABSL_GUARDED_BY(mu_);
  v1::StoreRequests out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Client*> waiting_ ABSL_GUARDED_BY(mu_);
};

constexpr int kChannels = 8;

struct Shared {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ops{0};
  std::atomic<int64_t> errors{0};
  absl::Mutex mu;
  int running ABSL_GUARDED_BY(mu) = 0;
  std::string first_error ABSL_GUARDED_BY(mu);
};

// One client: a chain of calls, each started from the previous one's
// completion.
class Client {
 public:
  Client(int id, v1::Store::Stub* stub, StreamDriver* stream, std::string op,
         std::string prefix, std::string value, Shared* shared)
      : id_(id),
        stub_(stub),
        stream_(stream),
        op_(std::move(op)),
        prefix_(std::move(prefix)),
        value_(std::move(value)),
        shared_(shared) {}

  void Next() {
    if (shared_->stop.load()) {
      absl::MutexLock lock(&shared_->mu);
      --shared_->running;
      return;
    }
    // The previous call's context stays alive until this call's callback (it
    // was destroyed from within its own callback otherwise).
    std::unique_ptr<grpc::ClientContext>& context = contexts_[n_ % 2];
    context = std::make_unique<grpc::ClientContext>();
    start_ = absl::Now();
    if (stream_ != nullptr) {
      v1::StoreRequest r;
      r.set_prefix(prefix_);
      if (op_ == "set") {
        r.mutable_set()->set_key(absl::StrCat("k", id_, "-", n_ % 1000));
        r.mutable_set()->set_value(value_);
      } else if (op_ == "get") {
        r.mutable_get()->set_key(absl::StrCat("k", id_));
      } else {
        r.mutable_add()->set_key("counter");
        r.mutable_add()->set_delta(1);
      }
      stream_->Submit(std::move(r), this);
      return;
    }
    auto done = [this](grpc::Status s) { Done(s); };
    if (op_ == "set") {
      set_.set_prefix(prefix_);
      set_.set_key(absl::StrCat("k", id_, "-", n_ % 1000));
      set_.set_value(value_);
      stub_->async()->Set(context.get(), &set_, &set_reply_, done);
    } else if (op_ == "get") {
      get_.set_prefix(prefix_);
      get_.set_key(absl::StrCat("k", id_));
      stub_->async()->Get(context.get(), &get_, &get_reply_, done);
    } else {
      add_.set_prefix(prefix_);
      add_.set_key("counter");
      add_.set_delta(1);
      stub_->async()->Add(context.get(), &add_, &add_reply_, done);
    }
  }

  std::vector<double>& latencies_us() { return latencies_us_; }

  void Done(const grpc::Status& s) {
    if (!s.ok()) {
      if (shared_->errors.fetch_add(1) == 0) {
        absl::MutexLock lock(&shared_->mu);
        shared_->first_error = s.error_message();
      }
    } else if (shared_->measuring.load()) {
      shared_->ops.fetch_add(1);
      if (latencies_us_.size() < 100'000) {
        latencies_us_.push_back(
            absl::ToDoubleMicroseconds(absl::Now() - start_));
      }
    }
    ++n_;
    Next();
  }

 private:
  const int id_;
  v1::Store::Stub* const stub_;
  StreamDriver* const stream_;  // null: unary calls
  const std::string op_, prefix_, value_;
  Shared* const shared_;
  std::unique_ptr<grpc::ClientContext> contexts_[2];
  absl::Time start_;
  int64_t n_ = 0;
  v1::SetRequest set_;
  v1::SetResponse set_reply_;
  v1::GetRequest get_;
  v1::GetResponse get_reply_;
  v1::AddRequest add_;
  v1::AddResponse add_reply_;
  std::vector<double> latencies_us_;
};

void StreamDriver::OnReadDone(bool ok) {
  if (!ok) return;
  std::vector<std::pair<Client*, grpc::Status>> done;
  {
    absl::MutexLock lock(&mu_);
    for (const v1::StoreResponse& r : in_.responses()) {
      auto it = waiting_.find(r.id());
      if (it == waiting_.end()) continue;
      done.emplace_back(
          it->second,
          grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.message()));
      waiting_.erase(it);
    }
  }
  in_.Clear();
  StartRead(&in_);
  for (auto& [client, status] : done) client->Done(status);
}

int Run(const std::string& endpoint, int clients, const std::string& op,
        double seconds, int value_bytes, bool stream) {
  std::vector<std::unique_ptr<v1::Store::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("muster.storebench.channel", i);  // one connection each
    stubs.push_back(v1::Store::NewStub(grpc::CreateCustomChannel(
        endpoint, grpc::InsecureChannelCredentials(), args)));
  }
  const std::string prefix =
      absl::StrCat("storebench/", absl::ToUnixNanos(absl::Now()));
  const std::string value(value_bytes, 'v');
  if (op == "get") {
    // The keys the readers read.
    for (int i = 0; i < clients; ++i) {
      grpc::ClientContext ctx;
      v1::SetRequest req;
      req.set_prefix(prefix);
      req.set_key(absl::StrCat("k", i));
      req.set_value(value);
      v1::SetResponse resp;
      grpc::Status s = stubs[i % kChannels]->Set(&ctx, req, &resp);
      if (!s.ok()) {
        std::fprintf(stderr, "muster-store-bench: Set at %s failed: %s\n",
                     endpoint.c_str(), s.error_message().c_str());
        return 1;
      }
    }
  }
  Shared shared;
  std::vector<std::unique_ptr<StreamDriver>> streams;
  if (stream) {
    for (auto& stub : stubs) {
      streams.push_back(std::make_unique<StreamDriver>(stub.get()));
    }
  }
  std::vector<std::unique_ptr<Client>> all;
  for (int i = 0; i < clients; ++i) {
    all.push_back(std::make_unique<Client>(
        i, stubs[i % kChannels].get(),
        stream ? streams[i % kChannels].get() : nullptr, op, prefix, value,
        &shared));
  }
  {
    absl::MutexLock lock(&shared.mu);
    shared.running = clients;
  }
  for (auto& c : all) c->Next();
  absl::SleepFor(absl::Milliseconds(500));  // warm-up: connections, caches
  shared.measuring.store(true);
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  shared.measuring.store(false);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  const int64_t ops = shared.ops.load();
  shared.stop.store(true);
  {
    absl::MutexLock lock(&shared.mu);
    auto none_running = [&shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared.mu) {
      return shared.running == 0;
    };
    shared.mu.AwaitWithTimeout(absl::Condition(&none_running),
                               absl::Seconds(30));
  }
  for (auto& s : streams) s->Cancel();
  for (auto& s : streams) {
    for (int i = 0; i < 1000 && !s->done(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  std::vector<double> lat;
  for (auto& c : all)
    lat.insert(lat.end(), c->latencies_us().begin(), c->latencies_us().end());
  std::sort(lat.begin(), lat.end());
  auto pct = [&lat](double p) {
    return lat.empty() ? -1.0 : lat[static_cast<size_t>(p * (lat.size() - 1))];
  };
  std::printf(
      "op=%s mode=%s clients=%d ops=%lld seconds=%.2f ops_per_s=%.0f "
      "p50_us=%.0f p99_us=%.0f errors=%lld\n",
      op.c_str(), stream ? "stream" : "unary", clients,
      static_cast<long long>(ops), elapsed, static_cast<double>(ops) / elapsed,
      pct(0.5), pct(0.99), static_cast<long long>(shared.errors.load()));
  {
    absl::MutexLock lock(&shared.mu);
    if (!shared.first_error.empty())
      std::printf("first_error=%s\n", shared.first_error.c_str());
  }
  return shared.errors.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace muster::storebench

int main(int argc, char** argv) {
  CLI::App app{"muster-store-bench: Store throughput from many clients"};
  std::string endpoint, op = "set", mode = "stream";
  int clients = 1000, value_bytes = 64;
  double seconds = 5;
  app.add_option("--endpoint", endpoint, "musterd address, HOST:PORT")
      ->required();
  app.add_option("--clients", clients, "concurrent clients")
      ->check(CLI::Range(1, 100'000));
  app.add_option("--op", op, "set, get or add")
      ->check(CLI::IsMember({"set", "get", "add"}));
  app.add_option("--mode", mode,
                 "stream (one Store.Stream per connection) or unary calls")
      ->check(CLI::IsMember({"stream", "unary"}));
  app.add_option("--seconds", seconds, "measured time, s")
      ->check(CLI::Range(0.1, 600.0));
  app.add_option("--value-bytes", value_bytes, "size of each value")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return muster::storebench::Run(endpoint, clients, op, seconds, value_bytes,
                                 mode == "stream");
}
