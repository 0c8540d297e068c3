// ParseStatus (kernels/common/parse_status.h) as an absl::Status, for the
// OpKernels. Uses absl headers: not for CUDA translation units.
#ifndef DEEPREDUCE_KERNELS_COMMON_PARSE_STATUS_TF_H_
#define DEEPREDUCE_KERNELS_COMMON_PARSE_STATUS_TF_H_

#include "absl/status/status.h"
#include "kernels/common/parse_status.h"

namespace deepreduce {

inline absl::Status ToAbsl(const ParseStatus& s) {
  switch (s.code()) {
    case ParseStatus::kOk: return absl::OkStatus();
    case ParseStatus::kInternal: return absl::InternalError(s.message());
    case ParseStatus::kInvalid: break;
  }
  return absl::InvalidArgumentError(s.message());
}

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_PARSE_STATUS_TF_H_
