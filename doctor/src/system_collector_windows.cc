// The system collector on Windows: the portable Windows collector
// (doctor/src/collect_windows.cc) over the real Net (GetAdaptersAddresses,
// GetExtendedTcpTable with each socket's owner, Winsock) and ToolRunner
// (netsh in a job object). GPUs (nvcuda.dll) are not read yet.
#include <memory>

#include "muster/doctor/collector.h"

namespace muster::doctor {

std::unique_ptr<Collector> NewSystemCollector() {
  return NewWindowsCollector(platform::SystemNet(),
                             platform::SystemToolRunner());
}

}  // namespace muster::doctor
