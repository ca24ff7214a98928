"""Writes /app/measurements.csv: 300,000 sensor readings against a reference instrument.

Deterministic (a fixed seed): reference ≈ 3 × reading + 7, with noise. About 3.5 MiB of CSV,
written 50,000 rows at a time.
"""

import random
from array import array

ROWS, BLOCK = 300_000, 50_000


def blocks():
    rng = random.Random(1234)
    for _ in range(ROWS // BLOCK):
        readings = array("H", rng.randbytes(2 * BLOCK))  # 0 .. 65535
        noise = array("h", rng.randbytes(2 * BLOCK))  # -32768 .. 32767
        yield readings, [3 * r + 7 + n // 64 for r, n in zip(readings, noise)]


def main() -> None:
    with open("/app/measurements.csv", "w") as out:
        out.write("reading,reference\n")
        for readings, references in blocks():
            out.writelines(map("{},{}\n".format, readings, references))


if __name__ == "__main__":
    main()
