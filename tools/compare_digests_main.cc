// compare_digests <dir A> <dir B>: names the first step, rank, layer and tensor where two runs
// recorded with TANDEM_DIGESTS (training/digests.h) differ. Exit status 0 when the records are
// identical, 1 when they differ, 2 on bad input.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "training/digests.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: compare_digests <dir A> <dir B>  (folders of digests.rank<R>.tsv, TANDEM_DIGESTS)\n");
    return 2;
  }
  // Under `bazel run` relative folders are the caller's, not the runfiles'.
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  auto folder = [&](const char* arg) {
    return cwd != nullptr && arg[0] != '/' ? std::string(cwd) + "/" + arg : std::string(arg);
  };
  try {
    const std::string report = tandem::compare_digest_records(folder(argv[1]), folder(argv[2]));
    if (report.empty()) {
      std::printf("identical: every rank's digests of every step agree\n");
      return 0;
    }
    std::fputs(report.c_str(), stdout);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_digests: %s\n", e.what());
    return 2;
  }
}
