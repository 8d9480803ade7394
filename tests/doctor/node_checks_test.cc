// `muster doctor --node`'s checks (issue 28) on hand-made facts.
#include "muster/doctor/node_checks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::doctor {
namespace {

using ::testing::HasSubstr;

TEST(NodeChecksTest, DiskSpace) {
  NodeOptions o;
  o.log_dir = "/logs";
  o.min_free_bytes = int64_t{1} << 30;
  NodeFacts f;
  f.free_bytes = int64_t{1} << 20;
  Check c = DiskSpaceCheck(o, f);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("/logs"));
  f.free_bytes = int64_t{5} << 30;
  EXPECT_EQ(DiskSpaceCheck(o, f).status, Status::kPass);
  f.free_bytes = -1;
  f.space_error = "No such file or directory";
  EXPECT_EQ(DiskSpaceCheck(o, f).status, Status::kFail);
}

TEST(NodeChecksTest, GpusVisibleVsNprocPerNode) {
  NodeOptions o;
  o.nproc_per_node = "gpu";
  GpuFacts none;
  none.cuda.loaded = true;
  none.cuda.init_rc = 35;
  none.cuda.init_error = "CUDA_ERROR_INSUFFICIENT_DRIVER";
  Check c = GpusVisibleCheck(o, none);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("no GPU is visible"));
  EXPECT_THAT(c.summary, HasSubstr("35"));
  o.nproc_per_node = "4";
  EXPECT_EQ(GpusVisibleCheck(o, none).status, Status::kInfo);
  GpuFacts three;
  three.cuda.loaded = true;
  three.cuda.init_rc = 0;
  three.cuda.devices = 3;
  EXPECT_EQ(GpusVisibleCheck(o, three).status, Status::kFail);  // 4 > 3
  o.nproc_per_node = "gpu";
  EXPECT_EQ(GpusVisibleCheck(o, three).status, Status::kPass);
}

TEST(NodeChecksTest, AdvertisedInterfaceUp) {
  NodeOptions o;
  EXPECT_EQ(AdvertisedInterfaceCheck(o, {}).status, Status::kInfo);
  o.advertised_address = "10.0.0.5";
  InterfaceAddress eth;
  eth.name = "eth0";
  eth.address = "10.0.0.5";
  eth.up = true;
  eth.running = false;
  Check c = AdvertisedInterfaceCheck(o, {eth});
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("eth0"));
  eth.running = true;
  EXPECT_EQ(AdvertisedInterfaceCheck(o, {eth}).status, Status::kPass);
  o.advertised_address = "10.0.0.6";
  EXPECT_EQ(AdvertisedInterfaceCheck(o, {eth}).status, Status::kFail);
}

}  // namespace
}  // namespace muster::doctor
