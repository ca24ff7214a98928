#!/bin/bash
# Builds its index in memory: a brief peak of ~300 MiB (b"x" * n touches every page), about 1.2x
# the 256 MiB spec, then marks the work done. Killed under a 1x memory ceiling, fine under 3x.
python3 -c 'b = b"x" * (300 << 20); open("/app/done", "w").write("ok")'
