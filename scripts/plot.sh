#!/usr/bin/env bash
# Plots a training run's CSV (what a train_* program writes with --csv) as a PNG: the
# training loss of every step and, where the run evaluated, the held-out loss, on a log
# scale; the training and held-out accuracy on the right-hand axis.
#
#   bash scripts/plot.sh run.csv [run.png]        (default: the CSV's path with .png)
#
# Needs gnuplot. When it is missing the script installs Debian's gnuplot-nox with apt-get
# (`sudo apt-get install gnuplot-nox` does the same by hand); nothing else is installed.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "$1" = "--help" ]; then
    echo "usage: bash scripts/plot.sh CSV [PNG]" >&2
    exit 2
fi
csv=$1
png=${2:-${csv%.csv}.png}
if [ ! -r "$csv" ]; then
    echo "plot.sh: cannot read $csv" >&2
    exit 1
fi

if ! command -v gnuplot > /dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "plot.sh: gnuplot is missing; installing gnuplot-nox (apt-get)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gnuplot-nox > /dev/null
fi

# Columns by name, from the header: step,loss,accuracy,lr,tokens_per_s,elapsed_s,<evaluation columns>.
column() { head -n 1 "$csv" | tr ',' '\n' | grep -n -x -m 1 "$1" | cut -d: -f1; }
step=$(column step)
loss=$(column loss)
accuracy=$(column accuracy)
if [ -z "$step" ] || [ -z "$loss" ]; then
    echo "plot.sh: $csv has no step and loss columns (is it a training CSV?)" >&2
    exit 1
fi
eval_loss=$(column eval_loss || column val_loss || true)
eval_accuracy=$(column eval_accuracy || column val_accuracy || true)
rows=$(($(wc -l < "$csv") - 1))
if [ "$rows" -lt 1 ]; then
    echo "plot.sh: $csv has no rows yet" >&2
    exit 1
fi

# Accuracy columns hold fractions (or nothing, for a run without one).
has_accuracy=$(awk -F, -v c="${accuracy:-0}" 'NR > 1 && c > 0 && $c != "" && $c != "nan" { print 1; exit }' "$csv")

plots="'$csv' using $step:$loss with lines lw 1 lc rgb '#9ecae1' title 'training loss'"
if [ -n "$eval_loss" ]; then
    plots+=", '' using $step:$eval_loss with linespoints pt 7 ps 0.6 lw 2 lc rgb '#08519c' title 'held-out loss'"
fi
if [ -n "$has_accuracy" ]; then
    plots+=", '' using $step:(100*\$$accuracy) axes x1y2 with lines lw 1 lc rgb '#fdae6b' title 'training accuracy'"
fi
if [ -n "$eval_accuracy" ]; then
    plots+=", '' using $step:(100*\$$eval_accuracy) axes x1y2 with linespoints pt 7 ps 0.6 lw 2"
    plots+=" lc rgb '#d94801' title 'held-out accuracy'"
fi

gnuplot <<EOF
set terminal pngcairo size 900,540 font "sans,11"
set output '$png'
set datafile separator ','
set datafile missing ''
set key top center horizontal outside
set title "$(basename "$csv"): $rows steps" noenhanced
set xlabel 'step'
set ylabel 'loss (nats)'
set logscale y
set grid xtics ytics lc rgb '#dddddd'
$(if [ -n "$has_accuracy" ] || [ -n "$eval_accuracy" ]; then
    echo "set y2label 'accuracy (%)'"
    echo "set y2range [0:100]"
    echo "set y2tics 0,20,100"
    echo "set ytics nomirror"
fi)
plot $plots
EOF
echo "$png"
