// PlotReport: the points it writes (checked against numbers computed here from a run whose every
// loss is known), the images gnuplot draws from them, a missing or failing gnuplot, and resuming.
// Where gnuplot is not installed the image checks are skipped with a message (WARN "SKIPPED"),
// and everything else still runs.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "autograd/functions.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/plot_report.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"
#include "tests/training/test_util.h"

using namespace tandem;
using test_util::fresh_dir;
using test_util::read_all;

namespace {

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Whether PlotReport would find gnuplot (TANDEM_GNUPLOT unset): `gnuplot` on PATH.
bool have_gnuplot() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((dir + "/gnuplot").c_str(), X_OK) == 0) return true;
  return false;
}

// The image checks, or a visible skip where gnuplot is missing.
bool images_checkable() {
  if (have_gnuplot()) return true;
  WARN("SKIPPED: the PNG and SVG checks: no gnuplot on PATH (apt-get install gnuplot-nox)");
  return false;
}

void check_images(const std::string& stem, const std::vector<std::string>& titles) {
  const std::string png = read_all(stem + ".png");
  REQUIRE(png.size() > 1000);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  const std::string svg = read_all(stem + ".svg");
  REQUIRE(svg.compare(0, 5, "<?xml") == 0);
  REQUIRE(svg.find("<svg") != std::string::npos);
  REQUIRE(svg.find("</svg>") != std::string::npos);
  for (const auto& title : titles) REQUIRE(svg.find(">" + title + "<") != std::string::npos);
}

// Sets an environment variable for a scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

// Collects what is written to stderr (fd 2) for a scope.
class StderrCapture {
 public:
  StderrCapture() : path_(fresh_dir("stderr.txt")) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    return read_all(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// ---- a run whose every reported value is known ----
//
// 120 examples whose one feature is their index, read in order 16 at a time: iteration i (from 1)
// reads positions 16(i - 1) .. 16i - 1 of 0..119, 0..119, ..., and its loss is their mean (exact
// in float32). Epoch e ends at iteration ceil(120 e / 16). The evaluator reports
// validation/main/loss = iteration / 2.

double iteration_loss(int i) {
  double sum = 0;
  for (int j = 0; j < 16; ++j) sum += (16 * (i - 1) + j) % 120;
  return sum / 16;
}

int epoch_end(int e) { return (120 * e + 15) / 16; }

// The mean loss of iterations first..last.
double mean_loss(int first, int last) {
  double sum = 0;
  for (int i = first; i <= last; ++i) sum += iteration_loss(i);
  return sum / (last - first + 1);
}

struct Run {
  std::shared_ptr<StandardUpdater> updater;
  std::unique_ptr<Trainer> trainer;
};

Run make_run(Trigger stop, const std::string& out, Trigger eval_trigger = Trigger::epochs(1)) {
  Run r;
  auto model = std::make_shared<Linear>(1, 1);
  auto optimizer = std::make_shared<SGD>(0.1);
  optimizer->setup(model);
  std::vector<float> index(120);
  std::iota(index.begin(), index.end(), 0.0f);
  auto data = std::make_shared<TupleDataset>(std::vector<Tensor>{from_vector(index, {120, 1})});
  auto iterator = std::make_shared<SerialIterator>(data, 16, /*repeat=*/true, /*shuffle=*/false);
  LossFunction loss = [model](const Example& batch) {
    LossResult result;
    // W times 0: a parameter in the graph, so that the update has something to do.
    result.loss = F::mean(Variable(batch[0])) + F::sum(model->param("W")) * 0.0;
    return result;
  };
  r.updater = std::make_shared<StandardUpdater>(iterator, optimizer, loss);
  r.trainer = std::make_unique<Trainer>(r.updater, stop, out, model);
  StandardUpdater* updater = r.updater.get();
  auto eval_data = std::make_shared<TupleDataset>(std::vector<Tensor>{zeros({4, 1})});
  r.trainer->extend(std::make_shared<Evaluator>(std::make_shared<SerialIterator>(eval_data, 4, false, false),
                                                [updater](const Example&) {
                                                  return Observation{{"loss", updater->iteration() / 2.0}};
                                                }),
                    eval_trigger);
  return r;
}

// The .dat file's points by key ("# key" opens a block).
std::map<std::string, std::vector<std::pair<double, double>>> read_points(const std::string& path) {
  std::map<std::string, std::vector<std::pair<double, double>>> points;
  std::istringstream in(read_all(path));
  std::string key;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# tandem", 0) == 0 || line.empty()) continue;
    if (line.rfind("# ", 0) == 0) {
      key = line.substr(2);
      points[key];
      continue;
    }
    std::istringstream fields(line);
    double x = 0, y = 0;
    REQUIRE(static_cast<bool>(fields >> x >> y));
    points[key].emplace_back(x, y);
  }
  return points;
}

void check_points(const std::vector<std::pair<double, double>>& actual,
                  const std::vector<std::pair<double, double>>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("point " << i);
    CHECK(actual[i].first == expected[i].first);
    CHECK(actual[i].second == Approx(expected[i].second).epsilon(1e-8));  // written to 9 digits
  }
}

}  // namespace

TEST_CASE("PlotReport: per-epoch means of the training loss and the evaluator's values, drawn", "[plot]") {
  const std::string out = fresh_dir("plot_epoch");
  Run r = make_run(Trigger::epochs(4), out);
  auto log = std::make_shared<LogReport>();
  r.trainer->extend(log);
  auto plot = std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", "validation/main/loss", "main/never"},
                                           "epoch", Trigger::epochs(1), "loss.png");
  r.trainer->extend(plot);
  StderrCapture err;
  r.trainer->run();
  const std::string messages = err.text();
  if (have_gnuplot()) CHECK(messages.find("PlotReport") == std::string::npos);

  std::vector<std::pair<double, double>> loss, validation;
  for (int e = 1; e <= 4; ++e) {
    loss.emplace_back(e, mean_loss(epoch_end(e - 1) + 1, epoch_end(e)));
    validation.emplace_back(e, epoch_end(e) / 2.0);
  }
  const auto points = read_points(out + "/loss.dat");
  REQUIRE(points.size() == 2);  // main/never has no points and is left out
  check_points(points.at("main/loss"), loss);
  check_points(points.at("validation/main/loss"), validation);
  // LogReport's entries, from the same observations, agree.
  REQUIRE(log->log().size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(log->log()[i].at("main/loss") == Approx(loss[i].second).epsilon(1e-12));
    CHECK(log->log()[i].at("validation/main/loss") == validation[i].second);
  }
  const std::string script = read_all(out + "/loss.gp");
  CHECK(script.find("title 'main/loss'") != std::string::npos);
  CHECK(script.find("main/never") == std::string::npos);
  CHECK(script.find("pointtype 2") != std::string::npos);  // marker "x"
  CHECK(script.find("set grid") != std::string::npos);
  if (images_checkable()) check_images(out + "/loss", {"main/loss", "validation/main/loss"});
}

TEST_CASE("PlotReport: against the iteration, on an iteration trigger", "[plot]") {
  const std::string out = fresh_dir("plot_iteration");
  // The evaluator runs every 10 iterations: its key has a point at every other plot.
  Run r = make_run(Trigger::iterations(20), out, Trigger::iterations(10));
  auto plot = std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", "validation/main/loss"}, "iteration",
                                           Trigger::iterations(5), "curves/loss.svg", "o", false);
  r.trainer->extend(plot);
  REQUIRE(std::system(("mkdir -p " + out + "/curves").c_str()) == 0);
  r.trainer->run();
  const auto points = read_points(out + "/curves/loss.dat");
  check_points(points.at("main/loss"),
               {{5, mean_loss(1, 5)}, {10, mean_loss(6, 10)}, {15, mean_loss(11, 15)}, {20, mean_loss(16, 20)}});
  check_points(points.at("validation/main/loss"), {{10, 5}, {20, 10}});
  const std::string script = read_all(out + "/curves/loss.gp");
  CHECK(script.find("set xlabel 'iteration'") != std::string::npos);
  CHECK(script.find("pointtype 7") != std::string::npos);  // marker "o"
  CHECK(script.find("set grid") == std::string::npos);
  if (images_checkable()) check_images(out + "/curves/loss", {"main/loss", "validation/main/loss"});
}

TEST_CASE("PlotReport: without a working gnuplot training goes on, warns once and writes the points", "[plot]") {
  const std::string out = fresh_dir("plot_no_gnuplot");
  std::string expected_why;
  std::unique_ptr<ScopedEnv> env;
  SECTION("missing") {
    env = std::make_unique<ScopedEnv>("TANDEM_GNUPLOT", "/nonexistent/gnuplot");
    expected_why = "'/nonexistent/gnuplot' from TANDEM_GNUPLOT) could not be started: No such file or directory";
  }
  SECTION("failing") {
    env = std::make_unique<ScopedEnv>("TANDEM_GNUPLOT", "/bin/false");
    expected_why = "'/bin/false' from TANDEM_GNUPLOT) failed: it exited with status 1";
  }
  Run r = make_run(Trigger::epochs(3), out);
  r.trainer->extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss"}, "epoch", Trigger::epochs(1),
                                                 "loss.png"));
  StderrCapture err;
  r.trainer->run();
  const std::string messages = err.text();
  INFO(messages);
  REQUIRE(r.trainer->iteration() == epoch_end(3));
  CHECK(count(messages, "warning: PlotReport") == 1);
  CHECK(count(messages, "\n") == 1);
  CHECK(messages.find(expected_why) != std::string::npos);
  CHECK(messages.find("apt-get install gnuplot-nox") != std::string::npos);
  CHECK(messages.find(out + "/loss.dat is still written") != std::string::npos);
  REQUIRE(read_points(out + "/loss.dat").at("main/loss").size() == 3);
  CHECK_FALSE(exists(out + "/loss.png"));
  CHECK_FALSE(exists(out + "/loss.svg"));
}

TEST_CASE("PlotReport: a run resumed from a snapshot continues the curves", "[plot]") {
  // Two reports, to check that each keeps its own state in the snapshot.
  const auto add_plots = [](Trainer& trainer) {
    trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", "validation/main/loss"},
                                                "epoch", Trigger::epochs(1), "loss.png"));
    trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss"}, "iteration",
                                                Trigger::iterations(4), "iterations.png", ""));
  };
  const std::string whole = fresh_dir("plot_whole");
  {
    Run r = make_run(Trigger::epochs(4), whole);
    add_plots(*r.trainer);
    r.trainer->run();
  }
  // Cut at an epoch's end (iteration 15) and in the middle of epoch 2 and of a 4-iteration
  // interval (iteration 10), where the sums since the last point must be carried too.
  for (const std::int64_t cut : {15, 10}) {
    INFO("cut at iteration " << cut);
    const std::string out = fresh_dir("plot_resumed_" + std::to_string(cut));
    {
      Run first = make_run(Trigger::iterations(cut), out);
      add_plots(*first.trainer);
      first.trainer->extend(std::make_shared<SnapshotWriter>(), Trigger::iterations(cut));
      first.trainer->run();
    }
    Run second = make_run(Trigger::epochs(4), out);
    add_plots(*second.trainer);
    second.trainer->load_snapshot(out + "/snapshot_iter_" + std::to_string(cut) + ".npz");
    second.trainer->run();
    for (const char* name : {"/loss.dat", "/iterations.dat"}) {
      INFO(name);
      CHECK(read_all(out + name) == read_all(whole + name));
    }
    if (images_checkable()) check_images(out + "/loss", {"main/loss", "validation/main/loss"});
  }
}

TEST_CASE("PlotReport: key names are quoted for gnuplot, never run as commands", "[plot]") {
  // Reports a value under a key written to escape a gnuplot string.
  const std::string odd = "odd/'q'\" `touch PWNED1` @x $(touch PWNED2)\nsystem('touch PWNED3') \\";
  struct Odd : Extension {
    explicit Odd(std::string key) : key(std::move(key)) {}
    std::string name() const override { return "Odd"; }
    int priority() const override { return 300; }  // before the plot
    void operator()(Trainer& trainer) override { trainer.observation()[key] = trainer.updater().epoch(); }
    std::string key;
  };
  const std::string out = fresh_dir("plot_odd_keys");
  Run r = make_run(Trigger::epochs(2), out);
  r.trainer->extend(std::make_shared<Odd>(odd));
  r.trainer->extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", odd}, "epoch",
                                                 Trigger::epochs(1), "odd.png"));
  StderrCapture err;
  r.trainer->run();
  const std::string messages = err.text();
  const auto points = read_points(out + "/odd.dat");
  std::string written = odd;  // the key's newline is a space in the file
  written[written.find('\n')] = ' ';
  REQUIRE(points.size() == 2);
  check_points(points.at(written), {{1, 1}, {2, 2}});
  if (!images_checkable()) return;
  INFO(messages);
  CHECK(messages.find("PlotReport") == std::string::npos);  // gnuplot read the script
  for (const char* file : {"/PWNED1", "/PWNED2", "/PWNED3"}) CHECK_FALSE(exists(out + file));
  check_images(out + "/odd", {"main/loss"});
}

TEST_CASE("PlotReport: bad arguments are errors", "[plot]") {
  const std::vector<std::string> keys = {"main/loss"};
  CHECK_THROWS_WITH(PlotReport(keys, "elapsed_time"), Catch::Contains("x_key is 'epoch' or 'iteration'"));
  CHECK_THROWS_WITH(PlotReport(keys, "epoch", Trigger::epochs(1), "p.png", "q"), Catch::Contains("unknown marker 'q'"));
  CHECK_THROWS_WITH(PlotReport({}), Catch::Contains("no keys"));
  CHECK_THROWS_WITH(PlotReport({"a", "a"}), Catch::Contains("'a' given twice"));
  CHECK(PlotReport(keys, "epoch", Trigger::epochs(1), "loss.png").name() == "PlotReport/loss.png");
}
