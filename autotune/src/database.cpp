#include "sparsert/autotune/database.hpp"

#include "sparsert/autotune/space.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/runtime/content_store.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string_view>

namespace sparsert::autotune {

std::string tuning_key(const CsrMatrix& a, const Epilogue& ep, int32_t n, const codegen::Target& target,
                       const std::string& toolkit, const std::optional<ConvLayout>& conv) {
  Sha256 h;
  h.field("sparsert-tuning/1");
  h.field(codegen::kGeneratorVersion);
  h.field(codegen::kResourceReportVersion);  // its records were chosen by rejecting the candidates that spilled
  hash_layer(h, a, ep);
  h.field(std::to_string(n)).field(target.name()).field(toolkit);
  // Only a convolution's key has the field, so the keys of matrix layers are those of the records already written.
  if (conv) h.field("conv").field(conv_layout_json(*conv).dump());
  return h.hex();
}

namespace {
// The kind and its parameters of one entry; an entry without "kind" predates the kind's search and is baked.
TuningRecord kernel_of(const nlohmann::json& e, const std::string& where) {
  SPARSERT_USER_CHECK(e.is_object(), where, "not an object");
  TuningRecord r;
  if (e.contains("kind")) {
    SPARSERT_USER_CHECK(e.at("kind").is_string(), where, "kind is not a string");
    r.kind = codegen::parse_kernel_kind(e.at("kind").get<std::string>(), where + ".kind");
  }
  if (r.kind == codegen::KernelKind::kStreamed) {
    SPARSERT_USER_CHECK(e.contains("stream"), where, "stream: missing (the record's kind is streamed)");
    r.stream = stream_from_json(e.at("stream"), where + ".stream");
  } else {
    SPARSERT_USER_CHECK(e.contains("tile"), where, "tile: missing");
    r.tile = tile_from_json(e.at("tile"), where + ".tile");
  }
  return r;
}

TuningRecord record_of(const nlohmann::json& e, const std::string& where) {
  TuningRecord r = kernel_of(e, where);
  try {
    r.layer = e.value("layer", "");
    r.target = e.value("target", "");
    r.n = e.value("n", 0);
    r.mode = e.value("mode", "");
    r.device = e.value("device", "");
    r.score = e.value("score_us", 0.0);
    r.shared_from = e.value("shared_from", "");
  } catch (const nlohmann::json::exception& ex) {
    throw_user_error(where, "malformed field ({})", ex.what());
  }
  // n is the record's width (0 in records that predate it); the score a time, which compile and reports compare.
  SPARSERT_USER_CHECK(r.n >= 0, where + ".n", "{} is negative", r.n);
  SPARSERT_USER_CHECK(std::isfinite(r.score) && r.score >= 0, where + ".score_us", "{} is not a time in microseconds",
                      r.score);
  return r;
}

// One line of the file, without its newline.
std::string record_line(const std::string& key, const TuningRecord& r) {
  nlohmann::json j = {{"key", key},         {"kind", codegen::to_string(r.kind)}, {"layer", r.layer},
                      {"target", r.target}, {"n", r.n},                           {"mode", r.mode},
                      {"device", r.device}, {"score_us", r.score},                {"shared_from", r.shared_from}};
  if (r.kind == codegen::KernelKind::kStreamed) {
    j["stream"] = codegen::to_json(r.stream);
  } else {
    j["tile"] = codegen::to_json(r.tile);
  }
  return json_text_of(j);
}

using Records = std::map<std::string, TuningRecord>;

// The earlier format is one JSON document, {"format": ..., "entries": {...}}; a file of JSON lines is not one document
// unless it holds a single record, which has neither member.
std::optional<nlohmann::json> old_format_document(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  if (!j.is_object() || (!j.contains("format") && !j.contains("entries"))) return std::nullopt;
  return j;
}

void read_old_format(const nlohmann::json& j, const std::string& file, Records& out) {
  SPARSERT_USER_CHECK(j.value("format", "") == "sparsert-tuning/1", file, "format: expected \"sparsert-tuning/1\"");
  SPARSERT_USER_CHECK(j.contains("entries") && j.at("entries").is_object(), file, "entries: missing or not an object");
  for (const auto& [key, e] : j.at("entries").items()) {
    out[key] = record_of(e, fmt::format("{}: entries.{}", file, key.substr(0, 12)));
  }
}

// Where the complete lines of `text` end: a record is complete once its newline is written, or, where a file
// edited by hand ends without one, once the last line parses whole (a write cut short cannot: its brace comes last).
size_t complete_end(const std::string& text) {
  const size_t nl = text.rfind('\n');
  const size_t end = nl == std::string::npos ? 0 : nl + 1;
  if (end < text.size()) {
    const nlohmann::json last = nlohmann::json::parse(std::string_view(text).substr(end), nullptr, false);
    if (last.is_object()) return text.size();
  }
  return end;
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// A record line is one JSON object of well under this many bytes (a tile or stream object and a few fields).
constexpr size_t kLongestRecordLine = 64 * 1024;

// The line number of the incomplete last line of `text`, or 0 when there is none. Only what an interrupted append of
// a record can leave counts as one: the start of a JSON object, shorter than a record. Any other unparsable end (a
// file that is not a tuning database: notes, another program's JSON) is an error naming it, so that saving never cuts
// away what the user had.
size_t incomplete_line(const std::string& text, const std::string& file) {
  const size_t end = complete_end(text);
  const std::string_view tail = std::string_view(text).substr(end);
  if (blank(tail)) return 0;
  const size_t line =
      static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n')) + 1;
  const size_t first = tail.find_first_not_of(" \t\r");
  SPARSERT_USER_CHECK(tail.substr(first, 2) == "{\"" && tail.size() < kLongestRecordLine,
                      fmt::format("{}:{}", file, line),
                      "not a tuning record (is this a tuning database? sparsert writes one JSON object a line)");
  return line;
}

void read_lines(const std::string& text, const std::string& file, Records& out) {
  const size_t end = complete_end(text);
  size_t line_no = 0;
  for (size_t pos = 0; pos < end;) {
    const size_t nl = std::min(text.find('\n', pos), end);  // the last line may end without one
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (blank(line)) continue;
    const std::string where = fmt::format("{}:{}", file, line_no);
    // Strictly, as every JSON people may edit: a key twice in one record is refused, not resolved by the parser.
    const nlohmann::json e = parse_json_text(line, where);
    SPARSERT_USER_CHECK(e.is_object() && e.contains("key") && e.at("key").is_string() &&
                            !e.at("key").get<std::string>().empty(),
                        where, "key: missing or not a string");
    const std::string key = e.at("key").get<std::string>();
    out[key] = record_of(e, fmt::format("{}: {}", where, key.substr(0, 12)));
  }
  if (const size_t bad = incomplete_line(text, file)) {
    fmt::print(stderr, "sparsert: warning: {}:{}: incomplete record skipped (a write was interrupted)\n", file, bad);
  }
}

// An exclusive flock on the database file, released when it goes. flock holds the open file, not the path: a writer
// that waited while another converted the file (a new file renamed over it) would hold a file no longer at the path,
// so it opens the path again.
class LockedFile {
 public:
  explicit LockedFile(const std::filesystem::path& path) : path_(path) {
    while (true) {
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      SPARSERT_USER_CHECK(fd_ >= 0, path.string(), "cannot write ({})", std::strerror(errno));
      int rc;
      while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
      }
      if (rc != 0) fail("cannot lock");
      struct stat held {}, now {};
      if (::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
          held.st_ino == now.st_ino)
        return;
      ::close(fd_);
    }
  }
  ~LockedFile() { ::close(fd_); }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  void truncate(size_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail("cannot truncate");
  }
  // O_APPEND: every write lands at the end, whatever was there when the file was opened.
  void append(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("write failed");
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

 private:
  [[noreturn]] void fail(const char* what) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw_user_error(path_.string(), "{} ({})", what, std::strerror(e));
  }

  std::filesystem::path path_;
  int fd_ = -1;
};
}  // namespace

std::filesystem::path TuningDatabase::default_path() { return default_cache_dir() / "tuning.json"; }

TuningDatabase TuningDatabase::load(const std::filesystem::path& path) {
  TuningDatabase db;
  db.path_ = path;
  db.is_default_ = path == default_path();
  std::error_code ec;
  const bool there = std::filesystem::exists(path, ec);  // the throwing form's message would name no option
  SPARSERT_USER_CHECK(!ec, path.string(), "cannot be read ({})", ec.message());
  if (!there) return db;
  const std::string text = read_file(path);
  if (const auto old = old_format_document(text)) {
    read_old_format(*old, path.string(), db.records_);
  } else {
    read_lines(text, path.string(), db.records_);
  }
  return db;
}

// Only the default database's directory (the cache's) is made where missing: a path the user gave names a directory
// that is there, as every other output's must be; a mistyped one is an error, not a new directory tree.
void TuningDatabase::make_default_directory() const {
  if (!is_default_ || path_.parent_path().empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
}

void TuningDatabase::check_writable() const {
  make_default_directory();
  check_output_path(path_);
  std::error_code ec;
  SPARSERT_USER_CHECK(!std::filesystem::exists(path_, ec) || ::access(path_.c_str(), R_OK | W_OK) == 0, path_.string(),
                      "cannot update the tuning database: {}", std::strerror(errno));
}

void TuningDatabase::put(const std::string& key, const TuningRecord& r) {
  const auto it = records_.find(key);
  if (it != records_.end() && record_line(key, it->second) == record_line(key, r)) return;
  records_[key] = r;
  if (std::find(unsaved_.begin(), unsaved_.end(), key) == unsaved_.end()) unsaved_.push_back(key);
}

void TuningDatabase::save() {
  if (unsaved_.empty()) return;
  std::string lines;
  for (const std::string& key : unsaved_) lines += record_line(key, records_.at(key)) + '\n';
  make_default_directory();
  const std::string file = path_.string();
  LockedFile locked(path_);
  // Read under the lock: what other writers added since load() is on disk now, and nobody changes it while we hold it.
  const std::string text = read_file(path_);
  if (const auto old = old_format_document(text)) {
    Records converted;
    read_old_format(*old, file, converted);
    std::string all;
    for (const auto& [key, r] : converted) all += record_line(key, r) + '\n';
    write_file_atomic(path_, all + lines);
  } else {
    // An interrupted write left part of a record: cut it off, or the next record would be glued to it and lost.
    if (const size_t bad = incomplete_line(text, file)) {
      fmt::print(stderr, "sparsert: warning: {}:{}: incomplete record removed (a write was interrupted)\n", file, bad);
    }
    const size_t end = complete_end(text);
    if (end < text.size()) {
      locked.truncate(end);
      locked.append(lines);
    } else {
      // A last record without its newline gets one, or the next record would be glued to it.
      locked.append(!text.empty() && text.back() != '\n' ? "\n" + lines : lines);
    }
  }
  unsaved_.clear();
}

std::optional<TuningRecord> TuningDatabase::find(const std::string& key) const {
  auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

}  // namespace sparsert::autotune
