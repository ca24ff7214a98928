#!/bin/bash
[ "$(cat /app/done 2>/dev/null)" = ok ] && r=1 || r=0
echo $r > /logs/verifier/reward.txt
