#pragma once
// The message of the UserError `f` throws, or "(no UserError)": for tests that check a refusal's wording.
#include "sparsert/runtime/error.hpp"

#include <functional>
#include <string>

namespace sparsert::testing {

inline std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

}  // namespace sparsert::testing
