#!/usr/bin/python3
"""Writes the NumPy-made seeds of the npz and npy fuzz targets (what tandem's own writer never
produces: deflated entries, Fortran order, .npy format 2.0, '=' and '|' byte orders):

    /usr/bin/python3 tests/fuzz/make_numpy_seeds.py tests/fuzz/corpus

The output is committed; rerun only to change the seeds."""
import io
import os
import sys

import numpy as np


def main(root):
    npz_dir = os.path.join(root, "npz")
    npy_dir = os.path.join(root, "npy")
    os.makedirs(npz_dir, exist_ok=True)
    os.makedirs(npy_dir, exist_ok=True)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2, 3], dtype=np.int64)
    c = np.array([True, False])
    np.savez(os.path.join(npz_dir, "numpy_savez.npz"), a=a, b=b, c=c)
    np.savez_compressed(os.path.join(npz_dir, "numpy_savez_compressed.npz"), a=a, b=b, c=c)
    np.savez(os.path.join(npz_dir, "numpy_fortran.npz"), f=np.asfortranarray(a.astype(np.float64)))

    def npy(name, array, version=None):
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, array, version=version)
        with open(os.path.join(npy_dir, name), "wb") as out:
            out.write(buffer.getvalue())

    npy("numpy_fortran_f8.npy", np.asfortranarray(a.astype(np.float64)))
    npy("numpy_v2_i4.npy", np.array([[1, 2], [3, 4]], dtype=np.int32), version=(2, 0))
    npy("numpy_scalar_f8.npy", np.array(1.5))
    npy("numpy_bool_3d.npy", np.zeros((1, 2, 2), dtype=bool))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus")
