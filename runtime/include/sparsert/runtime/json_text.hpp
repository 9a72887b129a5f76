// JSON that people write (network descriptions, manifests, reports), parsed strictly.
#pragma once

#include "sparsert/runtime/error.hpp"

#include "sparsert/runtime/printable.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sparsert {

// Parses `text`; `where` names it in errors (a file name). Throws UserError with one line:
// - "WHERE: not valid JSON at line L, column C" for a syntax error,
// - "WHERE: not valid JSON (a number past the range of a double)" for 1e999 and the like,
// - "WHERE: PATH: the key appears twice in one object" for {"a": 1, "a": 2} (PATH like layers[0].bias): nlohmann
//   would keep one of the two silently, and which one the user meant is anyone's guess.
nlohmann::json parse_json_text(std::string_view text, const std::string& where);

// read_file, then parse_json_text naming the path.
nlohmann::json read_json_file(const std::filesystem::path& path);

// `j` as text (nlohmann's dump, indented by `indent` where >= 0), with every byte of its strings that is not UTF-8
// written as U+FFFD: a file name or command line that is not UTF-8 (a Linux path may be any bytes) goes into reports
// that way instead of failing the command after its work is done.
std::string json_text_of(const nlohmann::json& j, int indent = -1);

// `text` as json_text_of writes it into a string: each byte that is not UTF-8 as U+FFFD. Compares a name read back
// from such a report with the file name it came from.
std::string valid_utf8(std::string_view text);

// Field `name` of object `j`, or UserError "WHERE: missing field 'NAME'".
inline const nlohmann::json& json_field(const nlohmann::json& j, const std::string& where, const char* name) {
  SPARSERT_USER_CHECK(j.is_object() && j.contains(name), where, "missing field '{}'", name);
  return j.at(name);
}

namespace detail {
// Whether `v` is an integer that fits T.
template <typename T>
bool json_integer_fits(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  if (!v.is_number_integer()) return false;
  const int64_t x = v.get<int64_t>();
  return std::is_signed_v<T> ? x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                   x <= static_cast<int64_t>(std::numeric_limits<T>::max())
                             : x >= 0;
}
template <typename T>
struct is_integer_vector : std::false_type {};
template <typename T>
struct is_integer_vector<std::vector<T>> : std::bool_constant<std::is_integral_v<T> && !std::is_same_v<T, bool>> {};
}  // namespace detail

// Field `name` of `j` as T, or UserError "WHERE.NAME: unexpected value V". An integer field takes an integer that
// fits T: nlohmann converts 8.5 to 8 and 2^32 + 32 to 32 without a word. So does an array of integers, element by
// element (a manifest's [0, 4294967297] block range was read as [0, 1]).
template <typename T>
T json_get(const nlohmann::json& j, const std::string& where, const char* name) {
  const nlohmann::json& v = json_field(j, where, name);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!detail::json_integer_fits<T>(v)) {
      throw_user_error(where + "." + name, "unexpected value {} (an integer in range)", printable(v.dump(), 200));
    }
    return v.get<T>();
  } else if constexpr (detail::is_integer_vector<T>::value) {
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), detail::json_integer_fits<typename T::value_type>)) {
      throw_user_error(where + "." + name, "unexpected value {} (an array of integers in range)",
                       printable(v.dump(), 200));
    }
    return v.get<T>();
  } else {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw_user_error(where + "." + name, "unexpected value {}", printable(v.dump(), 200));
    }
  }
}

// Field `name` of `j` as T where it is there (checked as json_get checks it), else `fallback`: an optional field, whose
// wrong type is named ("WHERE.NAME: unexpected value V"), not reported as nlohmann's type error with no field.
template <typename T>
T json_get_or(const nlohmann::json& j, const std::string& where, const char* name, T fallback) {
  if (!j.is_object() || !j.contains(name)) return fallback;
  return json_get<T>(j, where, name);
}

}  // namespace sparsert
