// A main for the fuzz targets where libFuzzer is not linked (g++ builds):
//   TARGET FILE...          runs each file as one input (a corpus, a crash)
//   TARGET --random=N [--seed=S] [--max-len=L]
//                           runs N pseudo-random inputs (a bounded smoke run
//                           in ctest; scripts/fuzz.sh runs the real, coverage-
//                           guided libFuzzer build with clang)
// A failed check inside a target aborts, and the input that did it is written
// to ./crash-input for replay.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> current;

void SaveCurrent() {
  std::ofstream out("crash-input", std::ios::binary);
  out.write(reinterpret_cast<const char*>(current.data()),
            static_cast<std::streamsize>(current.size()));
}

}  // namespace

int main(int argc, char** argv) {
  long random_runs = -1;
  unsigned long seed = 1;
  size_t max_len = 4096;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--random=", 0) == 0) {
      random_runs = std::strtol(a.c_str() + 9, nullptr, 10);
    } else if (a.rfind("--seed=", 0) == 0) {
      seed = std::strtoul(a.c_str() + 7, nullptr, 10);
    } else if (a.rfind("--max-len=", 0) == 0) {
      max_len = std::strtoul(a.c_str() + 10, nullptr, 10);
    } else {
      files.push_back(a);
    }
  }
  std::signal(
      SIGABRT, +[](int) {
        SaveCurrent();
        std::signal(SIGABRT, SIG_DFL);
        std::abort();
      });
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 2;
    }
    current.assign(std::istreambuf_iterator<char>(in), {});
    LLVMFuzzerTestOneInput(current.data(), current.size());
  }
  if (random_runs > 0) {
    std::mt19937_64 gen(seed);
    for (long r = 0; r < random_runs; ++r) {
      current.resize(gen() % (max_len + 1));
      for (uint8_t& b : current) b = static_cast<uint8_t>(gen());
      LLVMFuzzerTestOneInput(current.data(), current.size());
    }
    std::printf("%ld random inputs, seed %lu: no failure\n", random_runs, seed);
  }
  return 0;
}
