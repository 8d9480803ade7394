// TCP port ranges as `muster doctor --ports` takes them. Pure functions.
#ifndef MUSTER_DOCTOR_PORTS_H_
#define MUSTER_DOCTOR_PORTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muster::doctor {

struct PortRange {
  int first = 0;
  int last = 0;
  bool Contains(int port) const { return port >= first && port <= last; }
};
// "29500", "29400-29500", "29400:29500", and comma lists of those.
// INVALID_ARGUMENT naming the text when a port is outside 1..65535 or a range
// is reversed.
absl::StatusOr<std::vector<PortRange>> ParsePortRanges(absl::string_view text);
// One "A", "A-B" or "A:B"; false when it is not one.
bool ParseOnePortRange(absl::string_view text, PortRange* range);
// "29400-29500,29600" (`range_sep` between first and last).
std::string PortRangesText(const std::vector<PortRange>& ranges,
                           absl::string_view range_sep = "-");
// Sorted, with overlapping and adjacent ranges merged.
std::vector<PortRange> NormalizePortRanges(std::vector<PortRange> ranges);

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_PORTS_H_
