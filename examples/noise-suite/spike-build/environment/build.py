"""The project's link step: 128 object files (1 MiB each) → dist/app.manifest.

A parallel linker holds however many objects its jobs have finished but not yet written, so its
peak memory depends on how the jobs interleave and changes from run to run. This stand-in draws
that number from the operating system's random source (random.SystemRandom): it holds 52 to 112
objects at once, a peak of about 60 to 122 MiB with the interpreter. The manifest never changes.
"""

import hashlib
import os
import random

OBJECTS = 128
HELD_MIN, HELD_MAX = 52, 112


def compile_object(index: int) -> bytes:
    """1 MiB whose every page is written (a real allocation, not a lazily zeroed one)."""
    return hashlib.sha256(b"object-%d" % index).digest() * 32768


def main() -> None:
    held = random.SystemRandom().randint(HELD_MIN, HELD_MAX)
    image, pending = hashlib.sha256(), []
    for index in range(OBJECTS):
        pending.append(compile_object(index))
        if len(pending) == held or index == OBJECTS - 1:
            for obj in pending:
                image.update(obj)
            pending.clear()
    os.makedirs("dist", exist_ok=True)
    with open("dist/app.manifest", "w") as out:
        out.write(f"objects {OBJECTS}\nsha256 {image.hexdigest()}\n")
    print(f"linked {OBJECTS} objects (held {held} at once)")


if __name__ == "__main__":
    main()
