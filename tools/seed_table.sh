#!/usr/bin/env bash
# seed_table.sh RESULTS.csv: the markdown table of tools/motion_benchmark.sh and
# tools/pretrain_benchmark.sh — for each value of the first column, the mean and the per-seed
# final and best validation accuracy, and the mean seconds a run. RESULTS.csv's columns:
# name,seed,epochs,final_val_acc,best_val_acc,final_train_loss,seconds (a header line first).
set -eu
echo "| $(head -1 "$1" | cut -d, -f1) | final val acc (mean) | per seed | best val acc (mean) | per seed | s/run |"
echo "|---|---|---|---|---|---|"
awk -F, 'NR > 1 { n[$1]++; f[$1] = f[$1] " " $4; b[$1] = b[$1] " " $5; sf[$1] += $4; sb[$1] += $5; t[$1] += $7 }
     END { for (m in n) printf "| %s | %.3f |%s | %.3f |%s | %.0f |\n", m, sf[m] / n[m], f[m], sb[m] / n[m], b[m], t[m] / n[m] }' \
    "$1" | sort
