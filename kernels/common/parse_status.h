// A TensorFlow-free status for the byte-level parsers and decoders that the
// CPU kernels and the fuzz harness (kernels/fuzz/) share: ok, or the message
// of the error the kernel raises. The kernels turn it into an absl::Status
// with kernels/common/parse_status_tf.h; the fuzz harness reads it directly.
#ifndef DEEPREDUCE_KERNELS_COMMON_PARSE_STATUS_H_
#define DEEPREDUCE_KERNELS_COMMON_PARSE_STATUS_H_

#include <string>
#include <utility>

namespace deepreduce {

class ParseStatus {
 public:
  enum Code { kOk = 0, kInvalid, kInternal };

  ParseStatus() = default;  // ok

  // The input is malformed (the kernels' InvalidArgumentError).
  static ParseStatus Invalid(std::string message) {
    return ParseStatus(kInvalid, std::move(message));
  }
  // A library call failed on valid input (the kernels' InternalError).
  static ParseStatus Internal(std::string message) {
    return ParseStatus(kInternal, std::move(message));
  }

  bool ok() const { return code_ == kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  ParseStatus(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = kOk;
  std::string message_;
};

}  // namespace deepreduce

// Returns from the enclosing function if `expr` (a ParseStatus) failed.
#define DR_RETURN_IF_PARSE_ERROR(expr)         \
  do {                                         \
    ::deepreduce::ParseStatus dr_st_ = (expr); \
    if (!dr_st_.ok()) return dr_st_;           \
  } while (0)

#endif  // DEEPREDUCE_KERNELS_COMMON_PARSE_STATUS_H_
