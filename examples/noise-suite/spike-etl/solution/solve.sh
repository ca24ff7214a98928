#!/bin/bash
set -euo pipefail
cd /app
python3 etl.py
awk -F, 'NR > 1 { total += $2 } END { printf "%.0f\n", total }' daily.csv > answer.txt
