// The trainers' command-line flags (examples/common/flags.h): both value syntaxes, defaults,
// --help (once under mpiexec), and a one-line error for each kind of bad command line.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/common/flags.h"

using namespace tandem;
using examples::Flags;
using Catch::Contains;

namespace {

// The flags of a test trainer (Flags cannot be copied: CLI11 holds the addresses of its values).
void declare(Flags& flags) {
  flags.add_int("epoch", 10, "epochs to train");
  flags.add_int("gpu", -1, "GPU to use, -1 for the CPU");
  flags.add_double("lr", 0.001, "learning rate");
  flags.add_string("out", "result", "output directory");
  flags.add_string("resume", "", "snapshot to resume from");
}

// argv as main() receives it: the program's name first.
struct Args {
  explicit Args(std::vector<std::string> args) : text(std::move(args)) {
    text.insert(text.begin(), "trainer");
    for (auto& a : text) pointers.push_back(a.data());
  }
  int argc() const { return static_cast<int>(pointers.size()); }
  char** argv() { return pointers.data(); }
  std::vector<std::string> text;
  std::vector<char*> pointers;
};

bool parse(Flags& flags, std::vector<std::string> args) {
  Args a(std::move(args));
  return flags.parse(a.argc(), a.argv());
}

std::string parse_error(std::vector<std::string> args) {
  Flags flags("trainer", "A test trainer.");
  declare(flags);
  try {
    parse(flags, std::move(args));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// What `fn` writes to the file descriptor `fd` (1: stdout, 2: stderr).
std::string captured(int fd, const std::function<void()>& fn) {
  char path[] = "/tmp/flags_test_XXXXXX";
  const int file = ::mkstemp(path);
  REQUIRE(file >= 0);
  std::fflush(nullptr);
  const int saved = ::dup(fd);
  ::dup2(file, fd);
  fn();
  std::fflush(nullptr);
  ::dup2(saved, fd);
  ::close(saved);
  ::close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

}  // namespace

TEST_CASE("flags take their defaults, `--flag value` and `--flag=value`; the last one given wins", "[flags]") {
  Flags flags("trainer", "A test trainer.");
  declare(flags);
  REQUIRE(parse(flags, {}));
  CHECK(flags.get_int("epoch") == 10);
  CHECK(flags.get_int("gpu") == -1);
  CHECK(flags.get_double("lr") == 0.001);
  CHECK(flags.get_string("out") == "result");
  CHECK(flags.get_string("resume").empty());

  Flags given("trainer", "A test trainer.");
  declare(given);
  REQUIRE(parse(given, {"--epoch", "3", "--gpu", "-1", "--lr=0.5", "--out", "/tmp/x", "--resume=latest", "--epoch=010"}));
  CHECK(given.get_int("epoch") == 10);  // decimal, not octal
  CHECK(given.get_int("gpu") == -1);
  CHECK(given.get_double("lr") == 0.5);
  CHECK(given.get_string("out") == "/tmp/x");
  CHECK(given.get_string("resume") == "latest");
  CHECK_THROWS_WITH(given.get_int("out"), Contains("no flag --out of that type"));
}

TEST_CASE("unknown flags and stray arguments are errors naming them", "[flags]") {
  CHECK(parse_error({"--epochs", "3"}) == "trainer: unknown flag --epochs (see --help)");
  CHECK(parse_error({"--epoch", "3", "--epochs=3"}) == "trainer: unknown flag --epochs (see --help)");
  CHECK(parse_error({"extra"}) == "trainer: unexpected argument 'extra' (see --help)");
}

TEST_CASE("a value that is not a number of the flag's type is an error naming the flag and the value", "[flags]") {
  CHECK(parse_error({"--epoch", "ten"}) == "trainer: flag --epoch needs an integer, got 'ten'");
  CHECK(parse_error({"--epoch", "1.5"}) == "trainer: flag --epoch needs an integer, got '1.5'");
  CHECK(parse_error({"--epoch", "0x10"}) == "trainer: flag --epoch needs an integer, got '0x10'");
  CHECK(parse_error({"--epoch", "99999999999999999999"}) ==
        "trainer: flag --epoch needs an integer, got '99999999999999999999'");
  CHECK(parse_error({"--lr", "fast"}) == "trainer: flag --lr needs a number, got 'fast'");
  CHECK(parse_error({"--epoch"}) == "trainer: flag --epoch needs a value (see --help)");
  CHECK(parse_error({"--lr", "1", "--out"}) == "trainer: flag --out needs a value (see --help)");
}

TEST_CASE("a flag defined twice is an error", "[flags]") {
  Flags flags("trainer", "A test trainer.");
  declare(flags);
  CHECK_THROWS_WITH(flags.add_int("epoch", 1, "again"), Contains("trainer: flag --epoch is defined twice"));
}

TEST_CASE("--help lists every flag with its default, and only the first process under mpiexec prints it",
          "[flags]") {
  ::unsetenv("PMI_RANK");
  for (const char* help : {"--help", "-h"}) {
    Flags flags("trainer", "A test trainer.");
  declare(flags);
    bool parsed = true;
    const std::string text = captured(1, [&] { parsed = parse(flags, {"--epoch", "3", help}); });
    CHECK(!parsed);
    CHECK_THAT(text, Contains("A test trainer."));
    for (const char* line : {"--epoch INT=10", "epochs to train", "--gpu INT=-1", "--lr FLOAT=0.001", "--out TEXT=result",
                             "output directory", "--resume TEXT", "snapshot to resume from"})
      CHECK_THAT(text, Contains(line));
  }
  ::setenv("PMI_RANK", "1", 1);
  Flags flags("trainer", "A test trainer.");
  declare(flags);
  bool parsed = true;
  CHECK(captured(1, [&] { parsed = parse(flags, {"--help"}); }).empty());
  CHECK(!parsed);
  ::unsetenv("PMI_RANK");
}

TEST_CASE("parse_command_line: go on, stop after --help, or one error line on stderr", "[flags]") {
  {
    Flags flags("trainer", "A test trainer.");
  declare(flags);
    Args a({"--epoch", "2"});
    CHECK(examples::parse_command_line(flags, a.argc(), a.argv(), "trainer", {"epoch"}) == -1);
    CHECK(flags.get_int("epoch") == 2);
  }
  {
    Flags flags("trainer", "A test trainer.");
  declare(flags);
    Args a({"--help"});
    int status = -2;
    captured(1, [&] { status = examples::parse_command_line(flags, a.argc(), a.argv(), "trainer"); });
    CHECK(status == 0);
  }
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--epoch", "0"}, "error: trainer: --epoch must be positive, got 0\n"},
           {{"--epoch", "ten"}, "error: trainer: flag --epoch needs an integer, got 'ten'\n"},
           {{"--epochs", "3"}, "error: trainer: unknown flag --epochs (see --help)\n"},
           {{"--gpu", "-2"}, "error: trainer: --gpu must be -1 (the CPU) or a device index, got -2\n"}}) {
    Flags flags("trainer", "A test trainer.");
  declare(flags);
    Args a(args);
    int status = -2;
    const std::string err =
        captured(2, [&] { status = examples::parse_command_line(flags, a.argc(), a.argv(), "trainer", {"epoch"}); });
    CHECK(status == 1);
    CHECK(err == message);
  }
}
