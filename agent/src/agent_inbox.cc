#include "agent/src/agent_inbox.h"

#include <utility>

namespace muster::agent {
namespace {

// How long one Next of the pump waits: its thread looks at RequestStop this
// often when the session is silent (a closed client usually ends Next at
// once; the in-process and test clients do not).
constexpr absl::Duration kPumpSlice = absl::Milliseconds(100);

}  // namespace

uint64_t AgentInbox::OpenSession() {
  absl::MutexLock lock(&mu_);
  items_.clear();
  return ++session_;
}

void AgentInbox::Push(uint64_t session, Item item) {
  absl::MutexLock lock(&mu_);
  if (session != session_) return;
  items_.push_back(std::move(item));
}

void AgentInbox::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void AgentInbox::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &AgentInbox::Ready), timeout);
  woken_ = false;
}

std::optional<AgentInbox::Item> AgentInbox::Take() {
  absl::MutexLock lock(&mu_);
  if (items_.empty()) return std::nullopt;
  Item item = std::move(items_.front());
  items_.pop_front();
  return item;
}

SessionPump::SessionPump(rendezvous::RendezvousClient* client,
                         AgentInbox* inbox)
    : client_(client), inbox_(inbox), session_(inbox->OpenSession()) {
  thread_ = std::thread([this] { Loop(); });
}

SessionPump::~SessionPump() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void SessionPump::Loop() {
  while (!quit_.load()) {
    AgentInbox::Item next = client_->Next(kPumpSlice);
    if (quit_.load()) return;
    if (next.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    const bool over = !next.ok();
    inbox_->Push(session_, std::move(next));
    // Anything but a message ends the session (RendezvousClient::Next).
    if (over) return;
  }
}

}  // namespace muster::agent
