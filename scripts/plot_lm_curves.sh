#!/usr/bin/env bash
# The validation curves of train_char_lm runs in one picture (gnuplot, SVG): bits per character
# on the validation subset at each log entry, one line per run.
#   scripts/plot_lm_curves.sh OUT.svg "1 rank" result/log "tp=2" tp/log "pp=2" pp/log ...
set -euo pipefail
command -v gnuplot > /dev/null || { echo "plot_lm_curves.sh: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
[[ $# -ge 3 && $(( ($# - 1) % 2 )) -eq 0 ]] || { echo "usage: $0 OUT.svg LABEL LOG [LABEL LOG ...]" >&2; exit 1; }
out="$1"; shift
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
plots=(); i=0
while [[ $# -gt 0 ]]; do
  label="$1" log="$2"; shift 2
  python3 -c '
import json, sys
for e in json.load(open(sys.argv[1])):
    if "validation/main/bpc" in e: print(e["iteration"], e["validation/main/bpc"])' "$log" > "$tmp/$i.dat"
  plots+=("'$tmp/$i.dat' using 1:2 with linespoints title '$label'")
  i=$((i + 1))
done
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal svg size 720,420 dynamic font 'sans,12'
set output '$out'
set xlabel 'iteration (batch of 32 x 64 characters)'
set ylabel 'validation bits per character'
set grid
set key top right
plot $joined
GP
echo "wrote $out"
