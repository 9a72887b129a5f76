#pragma once
// Error vocabulary shared by every layer.
//
// UserError: the input or the request was bad (a malformed file, an out-of-range index, an impossible parameter).
//   The message names where (file:line, or the field) and why, on one line. The CLI exits with code 2.
// WorkFailure: the input was fine but the work did not succeed (a check failed, a kernel did not verify). Exit 1.
// InternalError: a bug in sparsert. Exit 1.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace sparsert {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UserError : public Error {
 public:
  // `where` is a location such as "a.mtx:12", "layer 3: bias" or "--m-blocks".
  UserError(std::string_view where, std::string_view reason)
      : Error(fmt::format("{}: {}", where, reason)), where_(where), reason_(reason) {}
  const std::string& where() const noexcept { return where_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string where_;
  std::string reason_;
};

class WorkFailure : public Error {
 public:
  using Error::Error;
};

class InternalError : public Error {
 public:
  explicit InternalError(std::string_view what) : Error(fmt::format("internal error: {}", what)) {}
};

// Throw helpers: the message is formatted only on the failing path.
template <typename... Args>
[[noreturn]] void throw_user_error(std::string_view where, fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(where, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_internal_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InternalError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sparsert

// Checks whose message arguments are evaluated only when the condition fails.
#define SPARSERT_USER_CHECK(cond, where, ...)                      \
  do {                                                             \
    if (!(cond)) ::sparsert::throw_user_error((where), __VA_ARGS__); \
  } while (0)

#define SPARSERT_INTERNAL_CHECK(cond, ...)                        \
  do {                                                            \
    if (!(cond)) ::sparsert::throw_internal_error(__VA_ARGS__);   \
  } while (0)
