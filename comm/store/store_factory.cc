#include "comm/store/store_factory.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace muster::comm::internal {
namespace {

class Registry {
 public:
  Registry() {
    factories_.push_back(NewEnvStoreFactory());
    factories_.push_back(NewTcpStoreFactory());
    factories_.push_back(NewFileStoreFactory());
  }

  const StoreFactory* Find(absl::string_view scheme) {
    absl::MutexLock lock(&mu_);
    for (const auto& f : factories_) {
      if (f->scheme() == scheme) return f.get();
    }
    return nullptr;
  }

  std::string Usages() {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (size_t i = 0; i < factories_.size(); ++i) {
      if (i > 0) out += i + 1 == factories_.size() ? " or " : ", ";
      out += factories_[i]->usage();
    }
    return out;
  }

  absl::Status Add(std::unique_ptr<StoreFactory> factory) {
    absl::MutexLock lock(&mu_);
    for (const auto& f : factories_) {
      if (f->scheme() == factory->scheme()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "a store factory for ", factory->scheme(), ":// is registered"));
      }
    }
    factories_.push_back(std::move(factory));
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  // Never shrinks, and each factory stays where it is: the pointers Find
  // returns stay valid.
  std::vector<std::unique_ptr<StoreFactory>> factories_ ABSL_GUARDED_BY(mu_);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

const StoreFactory* FindStoreFactory(absl::string_view scheme) {
  return GetRegistry().Find(scheme);
}

std::string StoreFactoryUsages() { return GetRegistry().Usages(); }

absl::Status RegisterStoreFactory(std::unique_ptr<StoreFactory> factory) {
  if (factory == nullptr) {
    return absl::InvalidArgumentError("RegisterStoreFactory: null factory");
  }
  return GetRegistry().Add(std::move(factory));
}

}  // namespace muster::comm::internal
