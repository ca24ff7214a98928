#!/bin/bash
set -euo pipefail
printf "hello, level field\n" > /app/hello.txt
