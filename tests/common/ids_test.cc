// The id grammar shared by the launcher and the server (muster/common/ids.h).
#include "muster/common/ids.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(IdsTest, GrammarAcceptsLettersDigitsDotUnderscoreDash) {
  EXPECT_TRUE(IsValidId("a"));
  EXPECT_TRUE(IsValidId("Job_4.2-a"));
  EXPECT_TRUE(IsValidId(std::string(kMaxIdLength, 'x')));
  EXPECT_TRUE(ValidateId("--rdzv-id", "job-42").ok());
}

TEST(IdsTest, GrammarRefusesTheRest) {
  for (const std::string& bad :
       {std::string(), std::string("a/b"), std::string("a b"),
        std::string("a\\b"), std::string("n\n1"), std::string("a:b"),
        std::string("caf\xc3\xa9"), std::string(1, '\0'),
        std::string(kMaxIdLength + 1, 'x')}) {
    EXPECT_FALSE(IsValidId(bad)) << bad;
    absl::Status s = ValidateId("--rdzv-id", bad, "use e.g. --rdzv-id=job-42");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--rdzv-id ")) << bad;
    EXPECT_THAT(s.message(), HasSubstr("[A-Za-z0-9._-]{1,128}")) << bad;
    EXPECT_THAT(s.message(), HasSubstr("use e.g. --rdzv-id=job-42")) << bad;
  }
}

TEST(IdsTest, MessageEscapesAndBoundsTheId) {
  absl::Status s = ValidateId("node_id", "n\n1");
  EXPECT_THAT(s.message(), HasSubstr("node_id 'n\\n1' (3 bytes)"));
  const std::string huge(1 << 20, 'y');
  s = ValidateId("job_id", huge + "/");
  EXPECT_THAT(s.message(), HasSubstr("...' (1048577 bytes)"));
  EXPECT_LT(s.message().size(), 400u);
  EXPECT_THAT(ValidateId("job_id", "").message(), HasSubstr("job_id is empty"));
}

TEST(IdsTest, NodeIdOfAnyHostNameMatchesTheGrammar) {
  EXPECT_EQ(NodeIdOf("node0.example.com", "123-ab12"),
            "node0.example.com-123-ab12");
  EXPECT_EQ(NodeIdOf("my host/01", "1-a"), "my-host-01-1-a");
  EXPECT_EQ(NodeIdOf("", "1-a"), "node-1-a");
  const std::string id = NodeIdOf(std::string(253, 'h'), "4194304-ffff");
  EXPECT_TRUE(IsValidId(id)) << id;
  EXPECT_EQ(id.size(), kMaxIdLength);
  EXPECT_THAT(id, Not(HasSubstr("/")));
  EXPECT_THAT(id, ::testing::EndsWith("-4194304-ffff"));
}

}  // namespace
}  // namespace muster
