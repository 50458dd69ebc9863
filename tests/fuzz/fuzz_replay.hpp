// The replay of a fuzzer without libFuzzer (GPUMEM_FUZZ_REPLAY): every file named on the command
// line, and every file in each folder named, through LLVMFuzzerTestOneInput. CTest runs it over the
// checked-in corpus, so every build (the sanitizer builds too) runs the fuzzer's checks on it;
// `fuzz_X_replay crash-<hash>` reruns a libFuzzer finding without clang.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fuzz_replay {

inline bool read_file(const std::string& path, std::vector<uint8_t>& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  out.clear();
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  return true;
}

// The files at path: itself, or those in it (sorted, so every run goes in the same order).
inline std::vector<std::string> files_at(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {path};
  std::vector<std::string> out;
  if (DIR* d = opendir(path.c_str())) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(path + "/" + e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs the inputs. After a folder (a corpus), reached() says whether every path the corpus is meant
// to reach was reached: false, after saying which was not, fails the run, as the checks on that
// path no longer ran.
inline int main(int argc, char** argv, const char* name, bool (*reached)()) {
  size_t files = 0;
  bool corpus = false;
  std::vector<uint8_t> data;
  for (int a = 1; a < argc; ++a) {
    const std::vector<std::string> paths = files_at(argv[a]);
    corpus = corpus || paths.size() != 1 || paths[0] != argv[a];
    for (const std::string& path : paths) {
      if (!read_file(path, data)) {
        std::fprintf(stderr, "%s: cannot read %s\n", name, path.c_str());
        return 2;
      }
      LLVMFuzzerTestOneInput(data.data(), data.size());
      ++files;
    }
  }
  if (!files) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", name);
    return 2;
  }
  std::printf("%s: %zu file(s) ok\n", name, files);
  return !corpus || reached() ? 0 : 1;
}

}  // namespace fuzz_replay
