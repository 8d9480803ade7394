#include "platform/src/line_splitter.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace muster::platform::internal {
namespace {

using Piece = std::pair<std::string, bool>;

class Collector {
 public:
  void Feed(LineSplitter& s, const std::string& data) {
    s.Feed(absl::string_view(data.data(), data.size()),
           [this](absl::string_view t, bool nl) {
             pieces.emplace_back(std::string(t), nl);
           });
  }
  void Flush(LineSplitter& s) {
    s.Flush([this](absl::string_view t, bool nl) {
      pieces.emplace_back(std::string(t), nl);
    });
  }
  std::vector<Piece> pieces;
};

TEST(LineSplitterTest, WholeLinesInOneChunk) {
  LineSplitter s;
  Collector c;
  c.Feed(s, "a\nbb\n\nccc\n");
  EXPECT_EQ(c.pieces,
            (std::vector<Piece>{
                {"a", true}, {"bb", true}, {"", true}, {"ccc", true}}));
  EXPECT_EQ(s.pending(), 0u);
}

TEST(LineSplitterTest, LinesAcrossChunksAreJoined) {
  LineSplitter s;
  Collector c;
  c.Feed(s, "he");
  c.Feed(s, "llo");
  EXPECT_TRUE(c.pieces.empty());
  c.Feed(s, "\nwor");
  c.Feed(s, "ld\nx");
  EXPECT_EQ(c.pieces, (std::vector<Piece>{{"hello", true}, {"world", true}}));
  EXPECT_EQ(s.pending(), 1u);
  c.Flush(s);
  EXPECT_EQ(c.pieces.back(), Piece("x", false));
  c.Flush(s);  // nothing more
  EXPECT_EQ(c.pieces.size(), 3u);
}

TEST(LineSplitterTest, OneByteAtATime) {
  LineSplitter s;
  Collector c;
  for (char ch : std::string("ab\ncd\n")) c.Feed(s, std::string(1, ch));
  EXPECT_EQ(c.pieces, (std::vector<Piece>{{"ab", true}, {"cd", true}}));
}

TEST(LineSplitterTest, LongLinesComeInPiecesOfMaxLine) {
  LineSplitter s(4);
  Collector c;
  c.Feed(s, "abcdefghij");  // no newline: two full pieces out, "ij" kept
  EXPECT_EQ(c.pieces, (std::vector<Piece>{{"abcd", false}, {"efgh", false}}));
  c.Feed(s, "klmno\n");
  EXPECT_EQ(
      c.pieces,
      (std::vector<Piece>{
          {"abcd", false}, {"efgh", false}, {"ijkl", false}, {"mno", true}}));
  EXPECT_EQ(s.pending(), 0u);
}

TEST(LineSplitterTest, LineOfExactlyMaxLineIsOneLine) {
  LineSplitter s(4);
  Collector c;
  c.Feed(s, "ab");
  c.Feed(s, "cd");
  c.Feed(s, "\n");
  c.Feed(s, "wxyz\n");
  EXPECT_EQ(c.pieces, (std::vector<Piece>{{"abcd", true}, {"wxyz", true}}));
}

TEST(LineSplitterTest, LongLineWithNewlineInOneChunk) {
  LineSplitter s(3);
  Collector c;
  c.Feed(s, "a");
  c.Feed(s, "bcdefg\nh");
  EXPECT_EQ(c.pieces,
            (std::vector<Piece>{{"abc", false}, {"def", false}, {"g", true}}));
  EXPECT_EQ(s.pending(), 1u);
}

TEST(LineSplitterTest, BytesArePreserved) {
  // Whatever the chunking, concatenating the pieces (with '\n' where flagged)
  // gives the input.
  std::string input;
  for (int i = 0; i < 500; ++i)
    input += std::string(static_cast<size_t>(i % 37), 'a' + i % 26) +
             (i % 3 ? "\n" : "");
  for (size_t chunk : {1u, 2u, 7u, 64u, 1000u}) {
    LineSplitter s(16);
    Collector c;
    for (size_t off = 0; off < input.size(); off += chunk)
      c.Feed(s, input.substr(off, chunk));
    c.Flush(s);
    std::string joined;
    for (const auto& [t, nl] : c.pieces) {
      EXPECT_LE(t.size(), 16u);
      joined += t + (nl ? "\n" : "");
    }
    EXPECT_EQ(joined, input) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace muster::platform::internal
