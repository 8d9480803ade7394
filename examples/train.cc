// Data-parallel SGD on libmuster_comm: the README's demo.
//
//   muster --standalone --nproc-per-node=4 build/bin/train [--epochs=50]
//   [--lr=0.1] [--step-ms=0]
//
// Every rank generates the same synthetic linear-regression problem (fixed
// seed), keeps its shard (samples rank, rank + world_size, ...), and takes one
// full-batch gradient step per epoch: local sums of the gradient and the loss
// are all-reduced, so every rank applies the same update. At the end each rank
// prints one summary line, and the ranks check that they hold the same
// parameters bit for bit and that the loss fell. Exit status 0 on success, 1 on
// failure, 2 on a bad flag.
//
// In-place recovery (muster --recovery=in-place): between steps the ranks ask
// RoundChanged(); after it, or after a collective failed because the round
// ended (a node lost), they Recover() and carry on in the new world. At the
// start of every round rank 0 broadcasts the step and the parameters, so a
// newcomer gets them and every rank redoes the interrupted step from the same
// state. Prints `start: rank R of W pid P` once and `recovered: rank R of W
// (was r of w) in N ms` after each recovery, N counted from the failure (or
// RoundChanged) to the first successful collective of the new world.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "muster/comm/communicator.h"
#include "muster/platform/env.h"

namespace {

using muster::comm::Communicator;
using muster::comm::ReduceOp;

constexpr int kSamples = 4096;
constexpr int kFeatures = 16;
constexpr uint64_t kSeed = 20240601;
constexpr float kNoise = 0.03f;

// How long a rank waits for the next round after its round ended.
constexpr absl::Duration kRecoverTimeout = absl::Minutes(2);

struct Flags {
  int epochs = 50;
  float lr = 0.1f;
  int step_ms = 0;
  // Print `round ready: rank R of W at T` (T: Unix time in seconds) after the
  // first collective of every round, for bench/recovery.sh.
  bool timestamps = false;
  // Rank 0 prints `step S at T` every N steps (0: never), for the step rate
  // bench/stragglers.sh measures.
  int log_every = 0;
};

// --epochs=N / --epochs N, --lr=X / --lr X, --step-ms=MS / --step-ms MS.
// Returns false (after printing why) on a bad flag.
bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if ((arg == "--epochs" || arg == "--lr" || arg == "--step-ms" ||
                arg == "--log-every") &&
               i + 1 < argc) {
      value = argv[++i];
    }
    if (arg == "--timestamps" && eq == std::string::npos) {
      flags->timestamps = true;
      continue;
    }
    const bool ok =
        (arg == "--epochs" && absl::SimpleAtoi(value, &flags->epochs) &&
         flags->epochs > 0) ||
        (arg == "--lr" && absl::SimpleAtof(value, &flags->lr) &&
         flags->lr > 0) ||
        (arg == "--step-ms" && absl::SimpleAtoi(value, &flags->step_ms) &&
         flags->step_ms >= 0) ||
        (arg == "--log-every" && absl::SimpleAtoi(value, &flags->log_every) &&
         flags->log_every >= 0);
    if (ok) continue;
    std::cerr
        << "usage: train [--epochs=N (default 50)] [--lr=X (default 0.1)]\n"
           "             [--step-ms=MS (sleep per step, default 0)] "
           "[--timestamps]\n"
           "             [--log-every=N (rank 0 prints every N steps)]\n"
           "  run it under the launcher:\n"
           "  muster --standalone --nproc-per-node=4 train\n";
    return false;
  }
  return true;
}

// y = X w_true + b_true + noise, the same on every rank.
struct Problem {
  std::vector<float> x;  // kSamples x kFeatures, row-major.
  std::vector<float> y;
  std::vector<float> w_true;  // kFeatures weights, then the bias.
};

Problem MakeProblem() {
  Problem p;
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int j = 0; j < kFeatures; ++j) {
    p.w_true.push_back((j % 2 == 0 ? 1.0f : -1.0f) * (j + 1) / 8);
  }
  p.w_true.push_back(0.5f);
  p.x.resize(kSamples * kFeatures);
  for (float& v : p.x) v = normal(rng);
  for (int i = 0; i < kSamples; ++i) {
    float target = p.w_true[kFeatures];
    for (int j = 0; j < kFeatures; ++j) {
      target += p.x[i * kFeatures + j] * p.w_true[j];
    }
    p.y.push_back(target + kNoise * normal(rng));
  }
  return p;
}

// Over this rank's shard: the sums of the squared error's gradient (kFeatures +
// 1 entries), of the squared error, and the number of samples, packed for one
// all-reduce.
std::vector<double> LocalSums(const Problem& p, const std::vector<float>& w,
                              int rank, int size) {
  std::vector<double> sums(kFeatures + 3, 0.0);
  for (int i = rank; i < kSamples; i += size) {
    const float* xi = &p.x[i * kFeatures];
    double pred = w[kFeatures];
    for (int j = 0; j < kFeatures; ++j) pred += double{xi[j]} * w[j];
    const double err = pred - p.y[i];
    for (int j = 0; j < kFeatures; ++j) sums[j] += 2 * err * xi[j];
    sums[kFeatures] += 2 * err;
    sums[kFeatures + 1] += err * err;
    sums[kFeatures + 2] += 1;
  }
  return sums;
}

// FNV-1a over the bytes of the parameters.
uint32_t Checksum(const std::vector<float>& w) {
  uint32_t h = 2166136261u;
  const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
  for (size_t i = 0; i < w.size() * sizeof(float); ++i) {
    h = (h ^ bytes[i]) * 16777619u;
  }
  return h;
}

int Fail(const Communicator* comm, absl::string_view what,
         const absl::Status& status) {
  std::cerr << "train";
  if (comm != nullptr) {
    std::cerr << " rank " << comm->rank() << "/" << comm->world_size();
  }
  std::cerr << ": " << what << ": " << status << "\n";
  return 1;
}

// The training state rank 0 hands to every rank at the start of a round.
struct State {
  int step = 0;  // The next step; epochs + 1 once the last pass is done.
  double first_loss = 0;
  double loss = 0;  // The last pass's.
  std::vector<float> w = std::vector<float>(kFeatures + 1, 0.0f);
};

absl::Status BroadcastState(Communicator& comm, State& state) {
  double head[3] = {static_cast<double>(state.step), state.first_loss,
                    state.loss};
  absl::Status s = comm.Broadcast(absl::MakeSpan(head), 0);
  if (s.ok()) s = comm.Broadcast(absl::MakeSpan(state.w), 0);
  if (!s.ok()) return s;
  state.step = static_cast<int>(head[0]);
  state.first_loss = head[1];
  state.loss = head[2];
  return absl::OkStatus();
}

// Whether every rank holds `w` bit for bit: the element-wise min and max over
// the ranks must both equal it. The gathered checksums name the ranks that
// differ (in *differ, empty when they agree).
absl::Status CompareParameters(Communicator& comm, const std::vector<float>& w,
                               std::string* differ) {
  std::vector<float> lo = w;
  std::vector<float> hi = w;
  absl::Status s = comm.AllReduce(absl::MakeSpan(lo), ReduceOp::kMin);
  if (s.ok()) s = comm.AllReduce(absl::MakeSpan(hi), ReduceOp::kMax);
  std::vector<int64_t> checksums(comm.world_size());
  const int64_t mine = Checksum(w);
  if (s.ok()) {
    s = comm.AllGather(absl::Span<const int64_t>(&mine, 1),
                       absl::MakeSpan(checksums));
  }
  if (!s.ok()) return s;
  differ->clear();
  const size_t bytes = w.size() * sizeof(float);
  if (std::memcmp(lo.data(), w.data(), bytes) != 0 ||
      std::memcmp(hi.data(), w.data(), bytes) != 0) {
    for (int r = 0; r < comm.world_size(); ++r) {
      *differ += absl::StrFormat(" %d:0x%08x", r, checksums[r]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;

  auto created = Communicator::FromEnvironment();
  if (!created.ok()) return Fail(nullptr, "joining the job", created.status());
  std::unique_ptr<Communicator> comm = std::move(*created);
  std::cout << "start: rank " << comm->rank() << " of " << comm->world_size()
            << " pid " << muster::platform::ProcessId() << std::endl;

  const Problem problem = MakeProblem();
  State state;
  std::string differ;   // Ranks whose parameters differ, after the check.
  bool synced = false;  // Rank 0's state received in this round.
  // Set while recovering: when the round ended, and where this rank was.
  std::optional<absl::Time> ended_at;
  int was_rank = 0;
  int was_size = 0;
  // A failed collective (or RoundChanged) under in-place recovery: join the
  // next round. Without the control channel the failure is final.
  auto recover = [&](absl::string_view what, const absl::Status& failure) {
    if (!ended_at.has_value()) {
      ended_at = absl::Now();
      was_rank = comm->rank();
      was_size = comm->world_size();
    }
    if (!comm->RoundChanged()) {
      return Fail(comm.get(), what, failure);
    }
    absl::StatusOr<muster::comm::RecoverResult> r =
        comm->Recover(kRecoverTimeout);
    if (!r.ok()) return Fail(comm.get(), "recovering", r.status());
    synced = false;
    return 0;
  };
  while (true) {
    if (comm->RoundChanged()) {
      if (int rc = recover("", absl::OkStatus())) return rc;
      continue;
    }
    if (!synced) {
      // The first collective of every round: rank 0's step and parameters.
      absl::Status s = BroadcastState(*comm, state);
      if (!s.ok()) {
        if (int rc = recover("receiving the state from rank 0", s)) return rc;
        continue;
      }
      synced = true;
      if (flags.timestamps) {
        std::cout << absl::StrFormat(
                         "round ready: rank %d of %d at %.6f", comm->rank(),
                         comm->world_size(),
                         absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()))
                  << std::endl;
      }
      if (ended_at.has_value()) {
        std::cout << absl::StrFormat(
                         "recovered: rank %d of %d (was %d of %d) in %d ms",
                         comm->rank(), comm->world_size(), was_rank, was_size,
                         absl::ToInt64Milliseconds(absl::Now() - *ended_at))
                  << std::endl;
        ended_at.reset();
      }
    }
    if (state.step > flags.epochs) {
      // Same parameters everywhere, bit for bit.
      absl::Status s = CompareParameters(*comm, state.w, &differ);
      if (s.ok()) break;
      if (int rc = recover("comparing parameters", s)) return rc;
      continue;
    }
    // One full-batch step per epoch, then one more pass for the final loss.
    std::vector<double> sums =
        LocalSums(problem, state.w, comm->rank(), comm->world_size());
    absl::Status s = comm->AllReduce(absl::MakeSpan(sums), ReduceOp::kSum);
    if (!s.ok()) {
      if (int rc = recover(absl::StrFormat("all-reduce in step %d", state.step),
                           s)) {
        return rc;
      }
      continue;
    }
    const double n = sums[kFeatures + 2];
    state.loss = sums[kFeatures + 1] / n;
    if (state.step == 0) state.first_loss = state.loss;
    if (state.step < flags.epochs) {
      for (int j = 0; j <= kFeatures; ++j) {
        state.w[j] -= static_cast<float>(flags.lr * sums[j] / n);
      }
    }
    ++state.step;
    if (flags.log_every > 0 && comm->rank() == 0 &&
        state.step % flags.log_every == 0) {
      std::cout << absl::StrFormat(
                       "step %d at %.6f", state.step,
                       absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()))
                << std::endl;
    }
    if (flags.step_ms > 0 && state.step <= flags.epochs) {
      absl::SleepFor(absl::Milliseconds(flags.step_ms));
    }
  }

  const std::vector<float>& w = state.w;
  double distance = 0;
  for (int j = 0; j <= kFeatures; ++j) {
    distance += std::pow(w[j] - problem.w_true[j], 2);
  }
  const int rank = comm->rank();
  const int size = comm->world_size();
  std::cout << absl::StrFormat(
                   "rank %d/%d: loss %.1e -> %.1e after %d steps, "
                   "params checksum 0x%08x, |w - w_true| %.3f",
                   rank, size, state.first_loss, state.loss, flags.epochs,
                   Checksum(w), std::sqrt(distance))
            << std::endl;
  if (!differ.empty()) {
    std::cerr << absl::StrFormat(
        "train rank %d/%d: ranks hold different parameters (checksums%s)\n",
        rank, size, differ);
    return 1;
  }
  if (!(state.loss < state.first_loss)) {
    std::cerr << absl::StrFormat(
        "train rank %d/%d: the loss did not fall (%.3e -> %.3e)\n", rank, size,
        state.first_loss, state.loss);
    return 1;
  }
  if (rank == 0 && size > 1) {
    std::cout << "all " << size << " ranks agree on the parameters"
              << std::endl;
  }
  comm->Shutdown();
  return 0;
}
