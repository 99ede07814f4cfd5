#!/usr/bin/env python3
"""compare_runs.py NAME DIR_A DIR_B [ITERATION...]: two runs of a trainer are the same bit for bit:
their logs (every value of every entry but the elapsed time) and their snapshots on every rank
(DIR/rank<r>), array by array but the wall-clock time: those of the ITERATIONs given, else every
one DIR_A holds; "none" compares the logs alone. Exits non-zero naming the first difference."""
import glob
import json
import os
import sys

import numpy as np

TIMES = {"elapsed_time", "trainer/elapsed_time"}


def without_times(entries):
    return [{k: v for k, v in e.items() if k not in TIMES} for e in entries]


def same(key, x, y):
    """Whether a snapshot's arrays are equal; the log kept in a snapshot (text) without its times."""
    if key.endswith("log_json"):  # LogReport's entries, one JSON object a line
        entries = lambda a: [json.loads(line) for line in "".join(map(chr, a.tolist())).splitlines() if line.strip()]
        return without_times(entries(x)) == without_times(entries(y))
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def main():
    name, a_dir, b_dir = sys.argv[1:4]
    iterations = sys.argv[4:]
    compared = 0
    for a_log in sorted(glob.glob(a_dir + "/log") + glob.glob(a_dir + "/rank*/log")):
        b_log = b_dir + a_log[len(a_dir):]
        a, b = json.load(open(a_log)), json.load(open(b_log))
        assert len(a) == len(b), (name, a_log, len(a), len(b))
        for x, y in zip(a, b):
            for key in x:
                if key not in TIMES:
                    assert x[key] == y.get(key), (name, a_log, x.get("iteration"), key, x[key], y.get(key))
        compared += 1
    pattern = lambda i: f"snapshot_iter_{i}.npz"
    snapshots = sorted(p for i in (iterations or ["*"]) for d in (a_dir, a_dir + "/rank*") for p in glob.glob(d + "/" + pattern(i)))
    if iterations == ["none"]:
        snapshots = []
    else:
        assert snapshots, (name, "no snapshot in", a_dir, iterations)
    for a_path in snapshots:
        b_path = b_dir + a_path[len(a_dir):]
        assert os.path.exists(b_path), (name, "missing", b_path)
        x, y = np.load(a_path), np.load(b_path)
        assert sorted(x.files) == sorted(y.files), (name, a_path, sorted(set(x.files) ^ set(y.files)))
        for key in x.files:
            if key in TIMES:
                continue
            assert same(key, x[key], y[key]), (name, a_path, key, "differs")
            compared += 1
    print(f"{name}: {compared} logs and arrays equal")


if __name__ == "__main__":
    main()
