// A worker of an outside project: joins the job it was launched into and checks
// an all-reduce. Exit 0 when every rank got the sum of all ranks.
#include <cstdio>
#include <vector>

#include "absl/types/span.h"
#include "muster/comm/communicator.h"

int main() {
  auto comm = muster::comm::Communicator::FromEnvironment();
  if (!comm.ok()) {
    std::fprintf(stderr, "consumer: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), size = (*comm)->world_size();
  std::vector<double> v = {static_cast<double>(rank + 1), 1.0};
  absl::Status s =
      (*comm)->AllReduce(absl::MakeSpan(v), muster::comm::ReduceOp::kSum);
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.ToString().c_str());
    return 1;
  }
  const double want = size * (size + 1) / 2.0;
  const bool ok = v[0] == want && v[1] == size;
  std::printf("consumer rank %d of %d: sum %g (want %g) %s\n", rank, size, v[0],
              want, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
