#!/bin/bash
# Recomputes every test's digest on its own (one fixture at a time, nothing cached) and compares
# the whole report, so a run that skipped or reordered tests cannot pass.
python3 - <<'PY'
import hashlib

FIXTURE_MIB = {"corpus": 40, "index": 24, "images": 24, "model": 16, "db": 12, "cache": 8}
TESTS = {
    "test_tokenize": ["corpus"], "test_search": ["corpus", "index"], "test_rank": ["index"],
    "test_thumbnails": ["images"], "test_caption": ["images", "model"], "test_embed": ["model"],
    "test_migrate": ["db"], "test_query": ["db"], "test_warm": ["cache"], "test_evict": ["cache"],
    "test_health": [], "test_config": [], "test_cli": [], "test_version": [], "test_logging": [],
    "test_retry": [],
}
lines = []
for test in sorted(TESTS):
    digest = hashlib.sha256(test.encode())
    for name in TESTS[test]:
        block = hashlib.sha256(name.encode()).digest() * 32768  # 1 MiB
        for _ in range(FIXTURE_MIB[name]):
            digest.update(block)
    lines.append(f"{test} PASSED {digest.hexdigest()[:16]}")
lines.append(f"{len(TESTS)} passed")
try:
    ok = open("/app/report.txt").read().splitlines() == lines
    ok = ok and open("/app/answer.txt").read().strip() == str(len(TESTS))
except OSError:
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
