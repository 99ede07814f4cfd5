// PlotReport (Chainer's extensions.PlotReport): plots chosen observations against the epoch or
// the iteration after each trigger, drawn by gnuplot as a PNG and an SVG in the trainer's out
// directory.
//
//   trainer.extend(std::make_shared<PlotReport>(
//       std::vector<std::string>{"main/loss", "validation/main/loss"}, "epoch", Trigger::epochs(1), "loss.png"));
//
// writes, after every epoch, into trainer.out():
//   loss.dat  the points, one block per key ("# <key>", then "x y" lines), blocks separated by
//             two blank lines (gnuplot's `index`);
//   loss.gp   the gnuplot script that draws them (`cd result && gnuplot loss.gp` redraws);
//   loss.png  (gnuplot's pngcairo terminal, or png where cairo is missing) and loss.svg.
// Each key's point is the mean of its values since the previous point, as LogReport's entries
// are; a key absent from an iteration's observation is skipped there. Values other extensions
// add (an Evaluator's "validation/main/loss") are taken as they stand at the plot's trigger, as
// LogReport does: give the Evaluator the plot's trigger (or one that fires with it). Keys without
// points yet are left out; with no point at all nothing is written yet.
//
// gnuplot is $TANDEM_GNUPLOT (a path) if set, else `gnuplot` on PATH (Debian: apt-get install
// gnuplot-nox). Where it is missing or fails, training goes on: one warning on stderr per
// PlotReport, and the .dat (and .gp) files are still written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "training/trainer.h"

namespace tandem {

class PlotReport : public Extension {
 public:
  // x_key: "epoch" or "iteration". filename: "loss.png" (or "loss.svg", or "loss") names the
  // files loss.{dat,gp,png,svg}, relative to trainer.out() unless absolute. marker: as
  // matplotlib's, one of x + * o . s ^ v D, or "" for lines without markers. grid: draw a grid.
  PlotReport(std::vector<std::string> y_keys, std::string x_key = "epoch", Trigger trigger = Trigger::epochs(1),
             std::string filename = "plot.png", std::string marker = "x", bool grid = true);

  // Unique per file, so that several PlotReports keep their own state in a snapshot.
  std::string name() const override { return "PlotReport/" + filename_; }
  Trigger default_trigger() const override { return trigger_; }
  void observe(Trainer& trainer, const Observation& observation) override;
  void operator()(Trainer& trainer) override;
  // The points so far and the sums since the last one, so that a resumed run continues the curves.
  NamedTensors state() const override;
  void restore(const NamedTensors& state) override;

  struct Series {
    std::string key;
    std::vector<double> x, y;  // the points so far
    double sum = 0;            // of the values observed since the last point
    std::int64_t count = 0;
  };
  const std::vector<Series>& series() const { return series_; }

 private:
  std::string data_text() const;
  std::string script_text(const std::string& base) const;
  // Runs gnuplot on the script in `dir`; on failure returns why (else "").
  std::string run_gnuplot(const std::string& dir, const std::string& script, std::string& tried) const;

  std::vector<Series> series_;
  std::string x_key_;
  Trigger trigger_;
  std::string filename_;
  std::string point_style_;  // gnuplot's words for the marker ("" for none)
  bool grid_;
  bool warned_ = false;
};

}  // namespace tandem
