// What both sides of the Store stream say about an op: its name, as the unary
// method's ("Set", "Get", ...), for metrics and messages.
#ifndef MUSTER_STORE_SRC_STORE_OPS_H_
#define MUSTER_STORE_SRC_STORE_OPS_H_

#include "muster/v1/store.pb.h"

namespace muster::store {

inline const char* StoreOpName(const v1::StoreRequest& r) {
  switch (r.op_case()) {
    case v1::StoreRequest::kSet:
      return "Set";
    case v1::StoreRequest::kGet:
      return "Get";
    case v1::StoreRequest::kAdd:
      return "Add";
    case v1::StoreRequest::kCompareSet:
      return "CompareSet";
    case v1::StoreRequest::kWait:
      return "Wait";
    case v1::StoreRequest::kMultiGet:
      return "MultiGet";
    case v1::StoreRequest::kMultiSet:
      return "MultiSet";
    case v1::StoreRequest::kDelete:
      return "Delete";
    case v1::StoreRequest::kNumKeys:
      return "NumKeys";
    case v1::StoreRequest::OP_NOT_SET:
      break;
  }
  return "Unknown";
}

}  // namespace muster::store

#endif  // MUSTER_STORE_SRC_STORE_OPS_H_
