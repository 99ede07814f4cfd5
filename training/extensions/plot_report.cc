#include "training/extensions/plot_report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/ops.h"
#include "layers/serializers/npz.h"

namespace tandem {

namespace {

// Matplotlib's markers as gnuplot point types (those of the pngcairo and svg terminals).
const std::map<std::string, std::string>& marker_styles() {
  static const std::map<std::string, std::string> styles = {
      {"x", "pointtype 2"}, {"+", "pointtype 1"}, {"*", "pointtype 3"},
      {"o", "pointtype 7"}, {".", "pointtype 7 pointsize 0.5"}, {"s", "pointtype 5"},
      {"^", "pointtype 9"}, {"v", "pointtype 11"}, {"D", "pointtype 13"}, {"", ""}};
  return styles;
}

// Control characters (a newline in a key would end a gnuplot command early, or a .dat comment)
// become spaces.
std::string printable(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return out;
}

// A gnuplot string literal. Single-quoted strings take no backslash escapes and no backquoted
// command or @macro substitution; a quote is written twice. Key names can never become commands.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : printable(text)) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// %.9g: the precision of the float32 values averaged, as LogReport's JSON; nan/inf as strtod
// and gnuplot read them (a NaN point is left out of its curve).
std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return buffer;
}

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

PlotReport::PlotReport(std::vector<std::string> y_keys, std::string x_key, Trigger trigger, std::string filename,
                       std::string marker, bool grid)
    : x_key_(std::move(x_key)), trigger_(trigger), filename_(std::move(filename)), grid_(grid) {
  TANDEM_CHECK(!y_keys.empty(), "PlotReport: no keys to plot");
  TANDEM_CHECK(x_key_ == "epoch" || x_key_ == "iteration", "PlotReport: x_key is 'epoch' or 'iteration', got '",
               x_key_, "'");
  TANDEM_CHECK(trigger_.period > 0, "PlotReport: the trigger period must be positive");
  TANDEM_CHECK(!filename_.empty() && filename_.back() != '/', "PlotReport: bad filename '", filename_, "'");
  const auto style = marker_styles().find(marker);
  TANDEM_CHECK(style != marker_styles().end(), "PlotReport: unknown marker '", marker,
               "' (one of x + * o . s ^ v D, or \"\" for none)");
  point_style_ = style->second;
  for (auto& key : y_keys) {
    TANDEM_CHECK(std::none_of(series_.begin(), series_.end(), [&](const Series& s) { return s.key == key; }),
                 "PlotReport: key '", key, "' given twice");
    series_.push_back(Series{std::move(key)});
  }
}

void PlotReport::observe(Trainer&, const Observation& observation) {
  for (auto& s : series_) {
    const auto it = observation.find(s.key);
    if (it == observation.end()) continue;
    s.sum += it->second;
    ++s.count;
  }
}

void PlotReport::operator()(Trainer& trainer) {
  const double x = x_key_ == "epoch" ? static_cast<double>(trainer.updater().epoch())
                                     : static_cast<double>(trainer.iteration());
  bool any = false;
  for (auto& s : series_) {
    // The mean since the last point; else a value another extension reported at this iteration.
    const auto reported = trainer.observation().find(s.key);
    if (s.count > 0) {
      s.x.push_back(x);
      s.y.push_back(s.sum / static_cast<double>(s.count));
    } else if (reported != trainer.observation().end()) {
      s.x.push_back(x);
      s.y.push_back(reported->second);
    }
    s.sum = 0;
    s.count = 0;
    any = any || !s.x.empty();
  }
  if (!any) return;

  std::string stem = filename_.front() == '/' ? filename_ : trainer.out() + "/" + filename_;
  for (const char* extension : {".png", ".svg"})
    if (ends_with(stem, extension)) stem.resize(stem.size() - 4);
  const auto slash = stem.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : stem.substr(0, slash + 1);
  const std::string base = stem.substr(slash == std::string::npos ? 0 : slash + 1);
  write_file_atomically(stem + ".dat", data_text());
  write_file_atomically(stem + ".gp", script_text(base));

  std::string tried;
  const std::string why = run_gnuplot(dir, base + ".gp", tried);
  if (why.empty() || warned_) return;
  // Once: a missing gnuplot would otherwise repeat itself at every trigger.
  warned_ = true;
  std::fprintf(stderr,
               "warning: PlotReport: %s.png and %s.svg are not drawn: gnuplot (%s) %s. Training goes on and "
               "%s.dat is still written; to draw the plots install gnuplot (apt-get install gnuplot-nox) or set "
               "TANDEM_GNUPLOT to its path.\n",
               stem.c_str(), stem.c_str(), tried.c_str(), why.c_str(), stem.c_str());
  std::fflush(stderr);
}

std::string PlotReport::data_text() const {
  std::string text = "# tandem PlotReport: y against " + x_key_ +
                     "; one block per key, blocks separated by two blank lines (gnuplot: index 0, 1, ...)\n";
  bool first = true;
  for (const auto& s : series_) {
    if (s.x.empty()) continue;
    text += (first ? "" : "\n\n") + std::string("# ") + printable(s.key) + "\n";
    // x is a count (epoch, iteration): written whole, whatever its size.
    for (std::size_t i = 0; i < s.x.size(); ++i)
      text += std::to_string(static_cast<long long>(s.x[i])) + " " + number(s.y[i]) + "\n";
    first = false;
  }
  return text;
}

std::string PlotReport::script_text(const std::string& base) const {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : series_)
    for (double x : s.x) lo = std::min(lo, x), hi = std::max(hi, x);
  std::string script = "# Written by tandem's PlotReport: `gnuplot " + base + ".gp` in this directory draws " + base +
                       ".png and " + base + ".svg from " + base + ".dat.\n";
  script += "set xlabel " + quoted(x_key_) + "\nset key below\n";
  if (grid_) script += "set grid\n";
  // Epochs and iterations are whole numbers: no ticks between them on a short axis, and a single
  // point gets a range around it rather than gnuplot's "empty x range" warning.
  if (hi - lo <= 10) script += "set xtics 1\n";
  if (hi == lo) {
    const auto x = static_cast<long long>(lo);
    script += "set xrange [" + std::to_string(x - 1) + ":" + std::to_string(x + 1) + "]\n";
  }
  // The x axis spans the points (not out to the next tick: no epoch 0), with room around them so
  // that those at the ends are not drawn on the border.
  script += "set autoscale xfix\nset offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05\n";
  std::string plot = "plot ";
  int index = 0;
  for (const auto& s : series_) {
    if (s.x.empty()) continue;
    plot += index == 0 ? quoted(base + ".dat") : ", \\\n     ''";  // '': the same file
    plot += " index " + std::to_string(index) + " using 1:2 with " +
            (point_style_.empty() ? "lines" : "linespoints " + point_style_) + " title " + quoted(s.key);
    ++index;
  }
  script += "if (strstrt(GPVAL_TERMINALS, ' pngcairo ') > 0) {\n  set terminal pngcairo noenhanced size 640,480\n"
            "} else {\n  set terminal png noenhanced size 640,480\n}\n";
  script += "set output " + quoted(base + ".png") + "\n" + plot + "\n";
  script += "set terminal svg noenhanced size 640,480 background rgb 'white'\nset output " + quoted(base + ".svg") +
            "\nreplot\nunset output\n";
  return script;
}

std::string PlotReport::run_gnuplot(const std::string& dir, const std::string& script, std::string& tried) const {
  const char* env = std::getenv("TANDEM_GNUPLOT");
  std::string program = env && *env ? env : "gnuplot";
  tried = env && *env ? "'" + program + "' from TANDEM_GNUPLOT" : "'gnuplot' on PATH";
  // gnuplot runs in the plot's directory (the script names its files relative to it), so a
  // relative path from the environment is made absolute first.
  if (program.find('/') != std::string::npos && program.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) program = std::string(cwd) + "/" + program;
  }
  // gnuplot's stderr comes back through a pipe, to quote in the one warning rather than print
  // at every trigger; stdin and stdout are /dev/null. posix_spawn, not fork: the trainer may hold
  // MPI and OpenMP threads, and nothing runs in the child before exec.
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0) return std::string("could not be started: pipe: ") + std::strerror(errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<char*> argv = {program.data(), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err[1]);
  if (spawned != 0) {
    ::close(err[0]);
    return std::string("could not be started: ") + std::strerror(spawned);
  }
  std::string messages;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(err[0], buffer, sizeof buffer);
    if (n > 0 && messages.size() < 2000) messages.append(buffer, static_cast<std::size_t>(n));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  // Its first lines of complaint, on one line.
  messages = printable(messages.substr(0, 400));
  while (!messages.empty() && messages.back() == ' ') messages.pop_back();
  const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                            : "was killed by signal " + std::to_string(WTERMSIG(status));
  return "failed: it " + how + (messages.empty() ? "" : " (" + messages + ")");
}

NamedTensors PlotReport::state() const {
  NamedTensors state;
  for (std::size_t i = 0; i < series_.size(); ++i) {
    const Series& s = series_[i];
    const std::string prefix = "series/" + std::to_string(i) + "/";
    const Shape shape{static_cast<std::int64_t>(s.x.size())};
    state.emplace_back(prefix + "key", string_to_tensor(s.key));
    state.emplace_back(prefix + "x", from_vector(s.x, shape));
    state.emplace_back(prefix + "y", from_vector(s.y, shape));
    state.emplace_back(prefix + "sum", full({}, s.sum, DType::f64));
    state.emplace_back(prefix + "count", full({}, static_cast<double>(s.count), DType::i64));
  }
  return state;
}

void PlotReport::restore(const NamedTensors& state) {
  // The saved series by their number, then matched to this report's keys by name: a resumed run
  // may plot other keys, and a snapshot from before this PlotReport existed has none.
  std::map<std::string, std::map<std::string, Tensor>> saved;
  for (const auto& [name, tensor] : state) {
    const auto slash = name.find('/', 7);
    if (name.compare(0, 7, "series/") != 0 || slash == std::string::npos) continue;
    saved[name.substr(7, slash - 7)][name.substr(slash + 1)] = tensor;
  }
  for (auto& [index, fields] : saved) {
    for (const char* field : {"key", "x", "y", "sum", "count"})
      TANDEM_CHECK(fields.count(field), "PlotReport(", filename_, "): the snapshot's series ", index, " has no '",
                   field, "'");
    const std::string key = tensor_to_string(fields["key"]);
    for (auto& s : series_) {
      if (s.key != key) continue;
      s.x = fields["x"].to_vector<double>();
      s.y = fields["y"].to_vector<double>();
      TANDEM_CHECK(s.x.size() == s.y.size(), "PlotReport(", filename_, "): the snapshot's points of '", key,
                   "' have ", s.x.size(), " x and ", s.y.size(), " y values");
      s.sum = fields["sum"].item();
      s.count = static_cast<std::int64_t>(fields["count"].item());
    }
  }
}

}  // namespace tandem
