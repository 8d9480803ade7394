// control_worker: a stand-in for a worker of libmuster_comm or muster.torch
// under --recovery=in-place, for the in-place end-to-end tests (it does not
// depend on libmuster_comm). It follows the control channel's contract
// (docs/architecture.md, "Control channel"): at start it writes `hello` into
// $MUSTER_CONTROL_DIR (atomically: hello.tmp, then rename) unless --no-hello,
// then polls `round` every 5 ms and records every new seq it sees.
//
// Everything it sees goes to <--out>/<pid>.log, one line each (so a test
// knows which process saw what):
//   start pid=P rank=R world=W restart=K control=0|1
//   round seq=S state=running|changing round=N rank=R world=W local=L group=G
//     restart=K
// It exits 0 once <--out>/done exists, and 1 once <--out>/fail.<pid> exists.
// It reads `round` and writes `hello` with the control channel's one codec
// (muster/common/control_round.h); otherwise standard library and POSIX only.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "muster/common/control_round.h"

namespace {

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "" : v;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void Append(const std::string& path, const std::string& line) {
  std::ofstream f(path, std::ios::app);
  f << line << "\n";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  bool hello = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--out=", 0) == 0) out = a.substr(6);
    if (a == "--no-hello") hello = false;
  }
  if (out.empty()) {
    fprintf(stderr, "control_worker: --out=DIR is required\n");
    return 2;
  }
  const long pid = static_cast<long>(getpid());
  const std::string log = out + "/" + std::to_string(pid) + ".log";
  const std::string dir = Env("MUSTER_CONTROL_DIR");
  Append(log, "start pid=" + std::to_string(pid) + " rank=" + Env("RANK") +
                  " world=" + Env("WORLD_SIZE") +
                  " restart=" + Env("TORCHELASTIC_RESTART_COUNT") +
                  " control=" + (dir.empty() ? "0" : "1"));
  if (hello && !dir.empty()) {
    const std::string tmp = dir + "/hello.tmp";
    {
      std::ofstream f(tmp);
      f << muster::common::FormatControlHello(pid, "control_worker");
    }
    if (rename(tmp.c_str(), (dir + "/hello").c_str()) != 0) {
      perror("control_worker: rename hello");
      return 2;
    }
  }
  std::string last_seq;
  const std::string fail = out + "/fail." + std::to_string(pid);
  while (true) {
    if (!dir.empty()) {
      // A partial or bad file reads as "no change" (the contract).
      const auto round =
          muster::common::ParseControlRound(Slurp(dir + "/round"));
      const std::string seq = round.ok() ? std::to_string(round->seq) : "";
      if (!seq.empty() && seq != last_seq) {
        last_seq = seq;
        Append(log, "round seq=" + seq +
                        " state=" + (round->running ? "running" : "changing") +
                        " round=" + std::to_string(round->round) +
                        " rank=" + std::to_string(round->rank) +
                        " world=" + std::to_string(round->world_size) +
                        " local=" + std::to_string(round->local_rank) +
                        " group=" + std::to_string(round->group_rank) +
                        " restart=" + std::to_string(round->restart_count));
      }
    }
    if (Exists(fail)) return 1;
    if (Exists(out + "/done")) return 0;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}
