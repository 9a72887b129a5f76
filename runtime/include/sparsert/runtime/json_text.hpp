// JSON that people write (network descriptions, manifests, reports), parsed strictly.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace sparsert {

// Parses `text`; `where` names it in errors (a file name). Throws UserError with one line:
// - "WHERE: not valid JSON at line L, column C" for a syntax error,
// - "WHERE: not valid JSON (a number past the range of a double)" for 1e999 and the like,
// - "WHERE: PATH: the key appears twice in one object" for {"a": 1, "a": 2} (PATH like layers[0].bias): nlohmann
//   would keep one of the two silently, and which one the user meant is anyone's guess.
nlohmann::json parse_json_text(std::string_view text, const std::string& where);

// read_file, then parse_json_text naming the path.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace sparsert
