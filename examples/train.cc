// Data-parallel SGD on libmuster_comm: the README's demo.
//
//   muster --standalone --nproc-per-node=4 build/bin/train [--epochs=50]
//   [--lr=0.1]
//
// Every rank generates the same synthetic linear-regression problem (fixed
// seed), keeps its shard (samples rank, rank + world_size, ...), and takes one
// full-batch gradient step per epoch: local sums of the gradient and the loss
// are all-reduced, so every rank applies the same update. At the end each rank
// prints one summary line, and the ranks check that they hold the same
// parameters bit for bit and that the loss fell. Exit status 0 on success, 1 on
// failure, 2 on a bad flag.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "muster/comm/communicator.h"

namespace {

using muster::comm::Communicator;
using muster::comm::ReduceOp;

constexpr int kSamples = 4096;
constexpr int kFeatures = 16;
constexpr uint64_t kSeed = 20240601;
constexpr float kNoise = 0.03f;

struct Flags {
  int epochs = 50;
  float lr = 0.1f;
};

// --epochs=N / --epochs N, --lr=X / --lr X. Returns false (after printing why)
// on a bad flag.
bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if ((arg == "--epochs" || arg == "--lr") && i + 1 < argc) {
      value = argv[++i];
    }
    const bool ok =
        (arg == "--epochs" && absl::SimpleAtoi(value, &flags->epochs) &&
         flags->epochs > 0) ||
        (arg == "--lr" && absl::SimpleAtof(value, &flags->lr) && flags->lr > 0);
    if (ok) continue;
    std::cerr
        << "usage: train [--epochs=N (default 50)] [--lr=X (default 0.1)]\n"
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

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;

  auto created = Communicator::FromEnvironment();
  if (!created.ok()) return Fail(nullptr, "joining the job", created.status());
  std::unique_ptr<Communicator> comm = std::move(*created);
  const int rank = comm->rank();
  const int size = comm->world_size();

  const Problem problem = MakeProblem();
  std::vector<float> w(kFeatures + 1, 0.0f);
  double first_loss = 0;
  double loss = 0;
  // One full-batch step per epoch, then one more pass for the final loss.
  for (int step = 0; step <= flags.epochs; ++step) {
    std::vector<double> sums = LocalSums(problem, w, rank, size);
    absl::Status s = comm->AllReduce(absl::MakeSpan(sums), ReduceOp::kSum);
    if (!s.ok()) {
      return Fail(comm.get(), absl::StrFormat("all-reduce in step %d", step),
                  s);
    }
    const double n = sums[kFeatures + 2];
    loss = sums[kFeatures + 1] / n;
    if (step == 0) first_loss = loss;
    if (step == flags.epochs) break;
    for (int j = 0; j <= kFeatures; ++j) {
      w[j] -= static_cast<float>(flags.lr * sums[j] / n);
    }
  }

  double distance = 0;
  for (int j = 0; j <= kFeatures; ++j) {
    distance += std::pow(w[j] - problem.w_true[j], 2);
  }
  const uint32_t checksum = Checksum(w);
  std::cout << absl::StrFormat(
                   "rank %d/%d: loss %.1e -> %.1e after %d steps, "
                   "params checksum 0x%08x, |w - w_true| %.3f",
                   rank, size, first_loss, loss, flags.epochs, checksum,
                   std::sqrt(distance))
            << std::endl;

  // Same parameters everywhere, bit for bit: the element-wise min and max over
  // the ranks must both equal this rank's values. The gathered checksums name
  // the ranks that differ.
  std::vector<float> lo = w;
  std::vector<float> hi = w;
  absl::Status s = comm->AllReduce(absl::MakeSpan(lo), ReduceOp::kMin);
  if (s.ok()) s = comm->AllReduce(absl::MakeSpan(hi), ReduceOp::kMax);
  std::vector<int64_t> checksums(size);
  const int64_t mine = checksum;
  if (s.ok()) {
    s = comm->AllGather(absl::Span<const int64_t>(&mine, 1),
                        absl::MakeSpan(checksums));
  }
  if (!s.ok()) return Fail(comm.get(), "comparing parameters", s);
  const size_t bytes = w.size() * sizeof(float);
  if (std::memcmp(lo.data(), w.data(), bytes) != 0 ||
      std::memcmp(hi.data(), w.data(), bytes) != 0) {
    std::string list;
    for (int r = 0; r < size; ++r) {
      list += absl::StrFormat(" %d:0x%08x", r, checksums[r]);
    }
    std::cerr << absl::StrFormat(
        "train rank %d/%d: ranks hold different parameters (checksums%s)\n",
        rank, size, list);
    return 1;
  }
  if (!(loss < first_loss)) {
    std::cerr << absl::StrFormat(
        "train rank %d/%d: the loss did not fall (%.3e -> %.3e)\n", rank, size,
        first_loss, loss);
    return 1;
  }
  if (rank == 0 && size > 1) {
    std::cout << "all " << size << " ranks agree on the parameters"
              << std::endl;
  }
  comm->Shutdown();
  return 0;
}
