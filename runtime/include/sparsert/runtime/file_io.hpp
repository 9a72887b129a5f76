#pragma once
// Whole-file reads and atomic writes: outputs go to a temporary file in the target directory and are renamed into
// place, so a failed or concurrent write never leaves a half-written file where the user's was.
#include <filesystem>
#include <string>
#include <string_view>

namespace sparsert {

// Throws UserError "PATH: cannot open (reason)" when the file cannot be read.
std::string read_file(const std::filesystem::path& path);

// Throws UserError naming the path when the directory is not writable or the write fails.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace sparsert
