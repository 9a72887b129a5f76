#pragma once
// A small FileCheck for golden tests of generated text. Directives, one a line:
//   CHECK: text          the next line containing `text`, after the previous match
//   CHECK-NEXT: text     the line right after the previous match contains `text`
//   CHECK-COUNT-n: text  the next n lines containing `text`, in order
//   CHECK-NOT: text      no line containing `text` between the previous match and the next CHECK (or the end)
//   CHECK-DAG is not supported. Returns "" on success, else a one-line description of the first failure.
#include <sstream>
#include <string>
#include <vector>

namespace sparsert::testing {

inline std::string filecheck(const std::string& text, const std::string& patterns) {
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  struct Directive {
    std::string kind;
    std::string text;
    int count = 1;
  };
  std::vector<Directive> dirs;
  {
    std::istringstream in(patterns);
    for (std::string l; std::getline(in, l);) {
      const size_t colon = l.find(": ");
      if (colon == std::string::npos) continue;
      std::string kind = l.substr(l.find_first_not_of(" \t"), colon - l.find_first_not_of(" \t"));
      Directive d{kind, l.substr(colon + 2)};
      if (kind.rfind("CHECK-COUNT-", 0) == 0) {
        d.count = std::stoi(kind.substr(12));
        d.kind = "CHECK-COUNT";
      }
      if (d.kind != "CHECK" && d.kind != "CHECK-NEXT" && d.kind != "CHECK-COUNT" && d.kind != "CHECK-NOT") {
        return "unknown directive: " + l;
      }
      dirs.push_back(d);
    }
  }
  size_t pos = 0;  // first line not yet consumed
  std::vector<std::string> pending_not;
  auto check_nots = [&](size_t from, size_t to) -> std::string {
    for (const std::string& n : pending_not) {
      for (size_t i = from; i < to && i < lines.size(); ++i) {
        if (lines[i].find(n) != std::string::npos) {
          return "CHECK-NOT: '" + n + "' found on line " + std::to_string(i + 1) + ": " + lines[i];
        }
      }
    }
    pending_not.clear();
    return "";
  };
  for (const Directive& d : dirs) {
    if (d.kind == "CHECK-NOT") {
      pending_not.push_back(d.text);
      continue;
    }
    if (d.kind == "CHECK-NEXT") {
      if (pos >= lines.size() || lines[pos].find(d.text) == std::string::npos) {
        return "CHECK-NEXT: '" + d.text + "' not on line " + std::to_string(pos + 1);
      }
      ++pos;
      continue;
    }
    for (int c = 0; c < d.count; ++c) {
      size_t i = pos;
      while (i < lines.size() && lines[i].find(d.text) == std::string::npos) ++i;
      if (i == lines.size()) {
        return d.kind + ": '" + d.text + "' not found (occurrence " + std::to_string(c + 1) + " of " +
               std::to_string(d.count) + ") after line " + std::to_string(pos);
      }
      if (std::string err = check_nots(pos, i); !err.empty()) return err;
      pos = i + 1;
    }
  }
  return check_nots(pos, lines.size());
}

}  // namespace sparsert::testing
