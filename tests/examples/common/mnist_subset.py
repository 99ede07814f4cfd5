#!/usr/bin/env python3
"""mnist_subset.py OUT TRAIN TEST: the first TRAIN training and TEST test examples of the
Fashion-MNIST in $TANDEM_MNIST_DIR (else /usr/share/datasets/fashion-mnist) written to OUT as the
four IDX files the examples read with --data-dir. The example tests use it to train fewer steps
under the sanitizers (TANDEM_TEST_SHORT=1)."""
import gzip
import os
import struct
import sys


def read(directory, name):
    plain = os.path.join(directory, name)
    if os.path.exists(plain):
        return open(plain, "rb").read()
    return gzip.open(plain + ".gz", "rb").read()


def main():
    out, sizes = sys.argv[1], {"train": int(sys.argv[2]), "t10k": int(sys.argv[3])}
    source = os.environ.get("TANDEM_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    os.makedirs(out, exist_ok=True)
    for part, n in sizes.items():
        images = read(source, f"{part}-images-idx3-ubyte")
        labels = read(source, f"{part}-labels-idx1-ubyte")
        magic, count, rows, cols = struct.unpack(">iiii", images[:16])
        assert magic == 2051 and struct.unpack(">ii", labels[:8]) == (2049, count) and 0 < n <= count, (part, n)
        with open(os.path.join(out, f"{part}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">iiii", magic, n, rows, cols) + images[16:16 + n * rows * cols])
        with open(os.path.join(out, f"{part}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">ii", 2049, n) + labels[8:8 + n])


if __name__ == "__main__":
    main()
