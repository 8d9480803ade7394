// Small files for tests: scripts and configuration written, outputs read.
#ifndef MUSTER_TESTS_TESTING_FILES_H_
#define MUSTER_TESTS_TESTING_FILES_H_

#include <string>
#include <vector>

namespace muster::testing {

// Writes text to path (replacing it) with permission bits `mode` (0755 for a
// script); returns path. A failure shows later, when the file is used.
std::string WriteFile(const std::string& path, const std::string& text,
                      int mode = 0644);

// The whole file, bytes as they are; "" when it cannot be read.
std::string ReadFile(const std::string& path);

// The file's non-empty lines (a log of events the workers appended); none
// when it cannot be read.
std::vector<std::string> ReadLines(const std::string& path);

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_FILES_H_
