#!/usr/bin/env bash
# tandem's .npz files open in NumPy, and NumPy's (savez, savez_compressed, Fortran order) open
# in tandem, with the same names, dtypes, shapes and values.
set -euo pipefail
tool="tests/layers/npz_tool"
dir="$TEST_TMPDIR"

"$tool" write "$dir/tandem.npz"
/usr/bin/python3 - "$dir/tandem.npz" <<'PY'
import sys, numpy as np
z = np.load(sys.argv[1])
assert sorted(z.files) == sorted(["model/W", "b", "t", "labels", "mask", "half", "brain"]), z.files
assert z["model/W"].dtype == np.float32 and z["model/W"].shape == (2, 3)
assert (z["model/W"] == np.array([[1.5, -2, 3], [4, 5, 6]], np.float32)).all()
assert z["b"].dtype == np.float64 and z["b"].tolist() == [0.25]
assert z["t"].dtype == np.int64 and z["t"].shape == () and int(z["t"]) == 42
assert z["labels"].dtype == np.int32 and z["labels"].tolist() == [7, -1]
assert z["mask"].dtype == np.bool_ and z["mask"].tolist() == [True, False, True]
values = np.array([1 / 3, 65504, -0.0, 1.00390625], np.float32)
# f16 is NumPy's float16 (its cast from float32 rounds to nearest even, as tandem's does).
assert z["half"].dtype == np.float16 and z["half"].shape == (4,)
assert z["half"].view(np.uint16).tolist() == values.astype(np.float16).view(np.uint16).tolist(), z["half"]
# bf16 is a 2-byte void type holding the bits (ml_dtypes' bfloat16 arrays read the same way).
brain = z["brain"]
assert brain.dtype.kind == "V" and brain.dtype.itemsize == 2 and brain.shape == (4,), brain.dtype
bits = np.array([1 / 3, -3e38, 1e-40, 1.00390625], np.float32).view(np.uint32).astype(np.uint64)
rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # to nearest even
assert brain.view(np.uint16).tolist() == rounded.tolist(), (brain.view(np.uint16), rounded)
as_f32 = (brain.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
assert abs(as_f32[0] - 1 / 3) < 2**-9 and as_f32[3] == 1.0, as_f32
print("numpy reads tandem's npz")
PY

/usr/bin/python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
arrays = dict(w=np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
              f=np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
              i=np.array([-3, 9], np.int32), j=np.array(5, np.int64), m=np.array([False, True]),
              h=np.array([0.5, -65504, np.inf], np.float16),
              v=(np.array([1.5, -2], np.float32).view(np.uint32) >> 16).astype(np.uint16).view("V2"))
np.savez(d + "/plain.npz", **arrays)
np.savez_compressed(d + "/compressed.npz", **arrays)
PY
expected='w f32 [2, 3] -2.5 -1.5 -0.5 0.5 1.5 2.5
f f64 [2, 3] 0 1 2 3 4 5
i i32 [2] -3 9
j i64 [] 5
m bool [2] 0 1
h f16 [3] 0.5 -65504 inf
v bf16 [2] 1.5 -2'
for f in plain compressed; do
  got="$("$tool" read "$dir/$f.npz")"
  if [[ "$got" != "$expected" ]]; then
    echo "tandem read $f.npz as:"; echo "$got"; echo "expected:"; echo "$expected"; exit 1
  fi
done
echo "tandem reads numpy's savez and savez_compressed"
