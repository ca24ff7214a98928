#!/bin/bash
set -euo pipefail
cd /app
python3 run_tests.py
awk '$2 == "passed" { print $1 }' report.txt > answer.txt
