// Gloo's libuv transport and FileStore as the Windows build uses them (built by
// scripts/build-windows.sh from Debian's Gloo commit with
// scripts/windows/patches/gloo/). Runs under wine64 through ctest; Windows only
// (Debian's Linux libgloo has no libuv transport).
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/uv/device.h"
#include "gtest/gtest.h"

namespace {

// A fresh directory under the test temp dir, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("muster-gloo-uv-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Every byte value, newline and carriage return included, comes back unchanged.
// Without 0002-filestore-binary-mode.patch each 0x0A became "\r\n" on Windows
// (text-mode fstream), and under wine the uv transport's addresses always hold
// 0x0A bytes (heap pointers in the uninitialized part of their
// sockaddr_storage).
TEST(GlooFileStore, BinaryValuesRoundTrip) {
  TempDir dir;
  gloo::rendezvous::FileStore store(dir.str());
  std::vector<char> value;
  for (int i = 0; i < 256; ++i) value.push_back(static_cast<char>(i));
  value.push_back('\n');
  value.push_back('\r');
  value.push_back('\n');
  store.set("key", value);
  EXPECT_EQ(store.get("key"), value);
}

// Two ranks (one thread each, each with its own libuv device on 127.0.0.1) meet
// through a FileStore and sum a vector with the option-based gloo::allreduce.
// (The uv transport implements only unbound buffers: the older algorithm
// classes such as AllreduceRing abort() in Pair::createSendBuffer, without a
// message.)
TEST(GlooUv, TwoRankAllreduceOverFileStore) {
  TempDir dir;
  constexpr int kSize = 2;
  constexpr int kCount = 1000;
  std::vector<std::vector<float>> data(kSize, std::vector<float>(kCount));
  std::vector<std::exception_ptr> errors(kSize);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kSize; ++rank) {
    for (int i = 0; i < kCount; ++i)
      data[rank][i] = static_cast<float>(i * (rank + 1));
    ranks.emplace_back([&, rank] {
      try {
        gloo::rendezvous::FileStore store(dir.str());
        gloo::transport::uv::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::uv::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(rank, kSize);
        context->setTimeout(std::chrono::seconds(60));
        context->connectFullMesh(store, device);
        gloo::AllreduceOptions opts(context);
        opts.setOutput(data[rank].data(), kCount);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(
                &gloo::sum<float>));
        opts.setTag(0);
        gloo::allreduce(opts);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < kSize; ++rank) {
    if (errors[rank]) {
      try {
        std::rethrow_exception(errors[rank]);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ": " << e.what();
      }
    }
  }
  for (int rank = 0; rank < kSize; ++rank) {
    for (int i = 0; i < kCount; ++i) {
      ASSERT_EQ(data[rank][i], static_cast<float>(i * 3))
          << "rank " << rank << " index " << i;
    }
  }
}

}  // namespace
