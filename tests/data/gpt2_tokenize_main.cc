// gpt2_tokenize_main [--dir DIR] FILE...: encodes each file (its whole content, as one string)
// with the GPT-2 tokenizer and writes, per file, a line "file I TOKENS N" and then the N ids one
// per line, the same format the gpt-3-encoder reference in gpt2_tokenizer_test.sh writes. Also
// checks decode(encode(text)) == text for each file (exit 2 otherwise). For that test only.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer/gpt2_tokenizer.h"

int main(int argc, char** argv) {
  std::string dir;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      files.push_back(arg);
    }
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    const tandem::Gpt2Tokenizer tokenizer = tandem::Gpt2Tokenizer::load(dir);
    const auto loaded = std::chrono::steady_clock::now();
    std::string out;
    std::size_t bytes = 0, tokens = 0;
    for (std::size_t f = 0; f < files.size(); ++f) {
      std::ifstream in(files[f], std::ios::binary);
      if (!in) {
        std::cerr << "gpt2_tokenize_main: cannot open " << files[f] << "\n";
        return 1;
      }
      std::ostringstream content;
      content << in.rdbuf();
      const std::string text = content.str();
      const std::vector<std::int32_t> ids = tokenizer.encode(text);
      if (tokenizer.decode(ids) != text) {
        std::cerr << "gpt2_tokenize_main: decode(encode(x)) != x for " << files[f] << "\n";
        return 2;
      }
      out += "file " + std::to_string(f) + " TOKENS " + std::to_string(ids.size()) + "\n";
      for (std::int32_t id : ids) {
        out += std::to_string(id);
        out += '\n';
      }
      bytes += text.size();
      tokens += ids.size();
    }
    const auto done = std::chrono::steady_clock::now();
    std::fwrite(out.data(), 1, out.size(), stdout);
    const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::cerr << "gpt2_tokenize_main: load " << seconds(start, loaded) << " s; " << files.size() << " files, " << bytes
              << " bytes -> " << tokens << " tokens, encode+decode " << seconds(loaded, done) << " s\n";
  } catch (const std::exception& e) {
    std::cerr << "gpt2_tokenize_main: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
