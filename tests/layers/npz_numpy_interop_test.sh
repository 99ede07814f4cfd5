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
assert sorted(z.files) == sorted(["model/W", "b", "t", "labels", "mask"]), z.files
assert z["model/W"].dtype == np.float32 and z["model/W"].shape == (2, 3)
assert (z["model/W"] == np.array([[1.5, -2, 3], [4, 5, 6]], np.float32)).all()
assert z["b"].dtype == np.float64 and z["b"].tolist() == [0.25]
assert z["t"].dtype == np.int64 and z["t"].shape == () and int(z["t"]) == 42
assert z["labels"].dtype == np.int32 and z["labels"].tolist() == [7, -1]
assert z["mask"].dtype == np.bool_ and z["mask"].tolist() == [True, False, True]
print("numpy reads tandem's npz")
PY

/usr/bin/python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
arrays = dict(w=np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
              f=np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
              i=np.array([-3, 9], np.int32), j=np.array(5, np.int64), m=np.array([False, True]))
np.savez(d + "/plain.npz", **arrays)
np.savez_compressed(d + "/compressed.npz", **arrays)
PY
expected='w f32 [2, 3] -2.5 -1.5 -0.5 0.5 1.5 2.5
f f64 [2, 3] 0 1 2 3 4 5
i i32 [2] -3 9
j i64 [] 5
m bool [2] 0 1'
for f in plain compressed; do
  got="$("$tool" read "$dir/$f.npz")"
  if [[ "$got" != "$expected" ]]; then
    echo "tandem read $f.npz as:"; echo "$got"; echo "expected:"; echo "$expected"; exit 1
  fi
done
echo "tandem reads numpy's savez and savez_compressed"
