#include "comm/reduce/reduce.h"

namespace muster::comm::internal {

absl::StatusOr<ReduceFn> ReduceFunction(DataType dtype, ReduceOp op) {
  ReduceFn fn;
  absl::Status status = VisitDataType(dtype, [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        fn = &Kernel<T, &Elem<T>::Add>;
        return absl::OkStatus();
      case ReduceOp::kProduct:
        fn = &Kernel<T, &Elem<T>::Multiply>;
        return absl::OkStatus();
      case ReduceOp::kMin:
        fn = &Kernel<T, &Elem<T>::Min>;
        return absl::OkStatus();
      case ReduceOp::kMax:
        fn = &Kernel<T, &Elem<T>::Max>;
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ReduceOp ", static_cast<int>(op)));
  });
  if (!status.ok()) return status;
  return fn;
}

void DivideInPlace(void* data, size_t count, DataType dtype, int n) {
  (void)VisitDataType(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* x = static_cast<T*>(data);
    for (size_t i = 0; i < count; ++i) x[i] = Elem<T>::Divide(x[i], n);
    return absl::OkStatus();
  });
}

}  // namespace muster::comm::internal
