#include "sparsert/runtime/json_text.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/printable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

namespace sparsert {

namespace {

// The parser's position, as the callback sees it: one frame per open object or array.
struct Frame {
  bool array = false;
  int64_t index = -1;      // arrays: the element being read
  std::string key;         // objects: the key being read
  std::set<std::string> keys;
};

std::string path_of(const std::vector<Frame>& frames, const std::string& last_key) {
  std::string path;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    if (frames[i].array) {
      path += fmt::format("[{}]", frames[i].index);
    } else {
      if (!path.empty()) path += '.';
      path += frames[i].key;
    }
  }
  if (!path.empty()) path += '.';
  return path + last_key;
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& where) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<Frame> frames;
  auto element_starts = [&] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  const nlohmann::json::parser_callback_t track = [&](int, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        element_starts();
        frames.push_back(Frame{event == Event::array_start, -1, {}, {}});
        break;
      case Event::object_end:
      case Event::array_end:
        frames.pop_back();
        break;
      case Event::key: {
        const std::string key = parsed.get<std::string>();
        Frame& f = frames.back();
        if (!f.keys.insert(key).second) {
          // printable(): keys may hold any character ("a\nb"), and the message must stay on one line.
          throw_user_error(where + ": " + printable(path_of(frames, key), 200), "the key appears twice in one object");
        }
        f.key = key;
        break;
      }
      case Event::value:
        element_starts();
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), track);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the character where the parser stopped.
    const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    const std::string_view before = text.substr(0, at);
    const int64_t line = std::count(before.begin(), before.end(), '\n') + 1;
    const size_t line_start = before.rfind('\n');
    const size_t column = at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    throw_user_error(where, "not valid JSON at line {}, column {}", line, column);
  } catch (const nlohmann::json::out_of_range&) {  // 406: a number past double's range
    throw_user_error(where, "not valid JSON (a number past the range of a double)");
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  return parse_json_text(read_file(path), path.string());
}

std::string json_text_of(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string valid_utf8(std::string_view text) {
  return nlohmann::json::parse(json_text_of(nlohmann::json(std::string(text)))).get<std::string>();
}

}  // namespace sparsert
