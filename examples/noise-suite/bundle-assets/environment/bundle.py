"""The front-end bundler: renders 56 assets of 1 MiB into a staging directory under /tmp, then
hashes them, in order, into dist/bundle.sha256 and removes the staging directory.

Its scratch space (56 MiB) is what makes it disk-hungry; like most build tools it does not clean
up after a failure, so a full disk stays full.
"""

import hashlib
import os
import shutil
import tempfile

ASSETS = 56


def render(index: int) -> bytes:
    return hashlib.sha256(b"asset-%d" % index).digest() * 32768  # 1 MiB


def main() -> None:
    staging = tempfile.mkdtemp(prefix="bundle-staging-")
    for index in range(ASSETS):
        with open(os.path.join(staging, f"asset-{index:03d}.bin"), "wb") as out:
            out.write(render(index))
    bundle = hashlib.sha256()
    for index in range(ASSETS):
        with open(os.path.join(staging, f"asset-{index:03d}.bin"), "rb") as fh:
            bundle.update(fh.read())
    os.makedirs("dist", exist_ok=True)
    with open("dist/bundle.sha256", "w") as out:
        out.write(bundle.hexdigest() + "\n")
    shutil.rmtree(staging)
    print(f"bundled {ASSETS} assets")


if __name__ == "__main__":
    main()
