// The file:///PATH init method: a FileStore shared by the ranks of one
// machine.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/src/environment.h"
#include "comm/src/os.h"
#include "comm/store/store_factory.h"
#include "muster/common/status.h"
#include "muster/store/file_store.h"

namespace muster::comm::internal {
namespace {

class FileStoreFactory final : public StoreFactory {
 public:
  std::string scheme() const override { return "file"; }
  std::string usage() const override { return "file:///PATH"; }

  absl::StatusOr<JobStore> Open(const StoreRequest& request) const override {
    const std::string path = AbsolutePathFromUri(request.address);
    if (path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("init method file://", request.address,
                       ": expected file:///ABSOLUTE/PATH (three slashes; "
                       "file:///C:/DIR/FILE on Windows)"));
    }
    JobStore job;
    job.rank = request.rank;
    job.world_size = request.world_size;
    MUSTER_RETURN_IF_ERROR(ResolveRankAndSize(job.rank, job.world_size));
    MUSTER_ASSIGN_OR_RETURN(job.store, store::FileStore::Open(path, job.rank));
    job.all_local = true;  // A store file is one machine's.
    return job;
  }
};

}  // namespace

std::unique_ptr<StoreFactory> NewFileStoreFactory() {
  return std::make_unique<FileStoreFactory>();
}

}  // namespace muster::comm::internal
