#!/bin/bash
# Reward 1 when /app/hello.txt holds the greeting.
if [ "$(tr -d '\n' < /app/hello.txt 2>/dev/null)" = "hello, level field" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
