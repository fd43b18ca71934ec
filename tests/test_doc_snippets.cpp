// Every C++ snippet of README.md and docs/*.md is compiled code: each of its lines must stand,
// as a line, in one of examples/*.cpp or examples/*.cu (which CI compiles and runs). A snippet
// edited in the docs alone, or an example edited without its snippet, fails here, naming the
// file, the line and the text.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#ifndef LRPE_SOURCE_DIR
#error "LRPE_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

namespace {

namespace fs = std::filesystem;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// The trimmed lines of every example.
std::set<std::string> example_lines(const fs::path& root) {
  std::set<std::string> lines;
  for (const auto& entry : fs::directory_iterator(root / "examples")) {
    const auto ext = entry.path().extension();
    if (ext != ".cpp" && ext != ".cu") continue;
    for (const auto& line : read_lines(entry.path())) lines.insert(trim(line));
  }
  return lines;
}

struct snippet_line {
  std::string file;
  int line;
  std::string text;
};

/// The non-empty lines of the ```cpp blocks of a Markdown file.
std::vector<snippet_line> cpp_lines(const fs::path& md, const std::string& name) {
  std::vector<snippet_line> out;
  bool in_cpp = false;
  int n = 0;
  for (const auto& raw : read_lines(md)) {
    ++n;
    const std::string t = trim(raw);
    if (t.rfind("```", 0) == 0) {
      in_cpp = !in_cpp && (t == "```cpp" || t == "```c++");
      continue;
    }
    if (in_cpp && !t.empty()) out.push_back({name, n, t});
  }
  return out;
}

}  // namespace

TEST_CASE("docs: every line of every C++ snippet in README.md and docs/*.md stands in a compiled example") {
  const fs::path root = LRPE_SOURCE_DIR;
  const auto examples = example_lines(root);
  std::vector<std::pair<fs::path, std::string>> docs = {{root / "README.md", "README.md"}};
  for (const auto& entry : fs::directory_iterator(root / "docs"))
    if (entry.path().extension() == ".md") docs.emplace_back(entry.path(), "docs/" + entry.path().filename().string());
  int snippet_lines = 0;
  for (const auto& [path, name] : docs) {
    for (const auto& s : cpp_lines(path, name)) {
      ++snippet_lines;
      CHECK_MESSAGE(examples.count(s.text) == 1,
                    s.file << ":" << s.line << " is in no example (examples/*.cpp, *.cu): " << s.text);
    }
  }
  // The docs do hold snippets (a broken reader would pass every check above vacuously).
  CHECK(snippet_lines > 50);
}
