#!/bin/bash
set -euo pipefail
cd /app
python3 bundle.py
tr -d '[:space:]' < dist/bundle.sha256 > answer.txt
