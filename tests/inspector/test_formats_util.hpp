#pragma once
// Helpers for the format tests: a private temporary directory and checks on UserError messages.
#include "sparsert/runtime/error.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace sparsert::testing {

// The shared scratch directory of tests/support, under the name these tests use.
using TempDir = ScratchDir;

// Runs `f`, which must throw UserError whose location is `expected_where` (e.g. "/tmp/.../a.tsv:3") and whose
// reason mentions `reason_part`; the whole message must be one line. Returns the message for further checks.
template <typename F>
std::string expect_user_error(F&& f, const std::string& expected_where, const std::string& reason_part) {
  try {
    f();
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.where(), expected_where) << msg;
    EXPECT_NE(e.reason().find(reason_part), std::string::npos) << "reason: " << e.reason();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    EXPECT_EQ(msg.rfind(expected_where, 0), 0u) << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected UserError at " << expected_where << ", got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected UserError at " << expected_where << ", nothing was thrown";
  return {};
}

inline std::string at(const std::filesystem::path& p, int line) { return p.string() + ":" + std::to_string(line); }

}  // namespace sparsert::testing
