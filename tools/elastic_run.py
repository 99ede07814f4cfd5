#!/usr/bin/env python3
"""elastic_run: runs a tandem trainer under mpiexec (or srun) and, when a rank or a host dies,
restarts it from the newest complete sharded checkpoint (comm/checkpoint), on as many ranks as
are left, up to --max-restarts times, logging every attempt.

    tools/elastic_run.py --ranks 4 --max-restarts 3 --log restarts.jsonl -- \\
        bazel-bin/examples/lm/train_char_lm --tp 2 --checkpoint-interval 100 --out result

Each attempt:
  1. counts the slots: --ranks, else the hostfile's (--hostfile, MPICH's "host:slots" lines, read
     again before every attempt, so a host removed from it is not used again), else SLURM's
     (SLURM_NTASKS inside an allocation);
  2. picks the ranks by the layout rule: the trainer's --tp x --pp stay, the data-parallel degree
     is what the slots allow (the largest multiple of tp x pp, or of --rank-multiple, up to the
     slots; an attempt with fewer than one such group stops the job);
  3. adds "--resume-checkpoint latest" when the checkpoint directory (the trainer's
     --checkpoint-dir, else <--out>/checkpoints) holds a complete checkpoint (a step_<N> directory
     with its manifest.json: one cut short by the crash is a step_<N>.partial and is skipped);
  4. runs `mpiexec.mpich -n R [-f hostfile] TRAINER ARGS...` (or `srun -n R ...` with
     --launcher srun) and waits.
A zero exit ends the job; another is a failure: the next attempt starts (at most --max-restarts
of them). Every attempt is one JSON line in --log: attempt, ranks, command, the checkpoint it
resumed from, exit status, seconds.

SLURM: inside an allocation (SLURM_JOB_ID set) the slots are SLURM_NTASKS and, with --launcher
srun, the ranks start with `srun -n R`; with --requeue, a job whose restarts are used up asks
SLURM to requeue it (`scontrol requeue $SLURM_JOB_ID`), so it starts again from its newest
checkpoint when nodes are free.

Testing aid: --fault-plan "rank=1,iteration=5[,slots=3];rank=2,iteration=9;..." sets, for attempt
i, TANDEM_FAULT_INJECT="rank=R,iteration=N,action=kill" (training/trainer.h: that rank kills
itself at that iteration); slots=S makes the following attempts see S slots (a host lost).
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time


def flag_value(args, name, default=None):
    """The value of --name in the trainer's arguments (the last one wins), or default."""
    value = default
    for i, a in enumerate(args):
        if a == "--" + name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--" + name + "="):
            value = a.split("=", 1)[1]
    return value


def without_flag(args, name):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--" + name:
            skip = True
            continue
        if a.startswith("--" + name + "="):
            continue
        out.append(a)
    return out


def hostfile_slots(path):
    slots = 0
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            host, _, count = line.partition(":")
            slots += int(count) if count else 1
    return slots


def latest_checkpoint(root):
    """The checkpoint committed last (root/latest names it), else the highest step_<N> directory of
    root with a manifest.json, as (step, path); None when there is none."""
    try:
        named = open(os.path.join(root, "latest")).read().strip()
        if re.fullmatch(r"step_\d+", named) and os.path.isfile(os.path.join(root, named, "manifest.json")):
            return int(named[5:]), os.path.join(root, named)
    except OSError:
        pass
    best = None
    if os.path.isdir(root):
        for name in os.listdir(root):
            m = re.fullmatch(r"step_(\d+)", name)
            if m and os.path.isfile(os.path.join(root, name, "manifest.json")):
                step = int(m.group(1))
                if best is None or step > best[0]:
                    best = (step, os.path.join(root, name))
    return best


def parse_fault_plan(text):
    plan = []
    for entry in filter(None, (e.strip() for e in (text or "").split(";"))):
        fields = dict(f.split("=", 1) for f in entry.split(","))
        unknown = set(fields) - {"rank", "iteration", "slots"}
        if unknown or "rank" not in fields or "iteration" not in fields:
            sys.exit(f"elastic_run: --fault-plan entry '{entry}': expected rank=R,iteration=N[,slots=S]")
        plan.append(fields)
    return plan


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, help="slots (ranks) available; default: the hostfile's or SLURM's")
    parser.add_argument("--hostfile", help="MPICH hostfile (host[:slots] lines), read again before every attempt")
    parser.add_argument("--max-restarts", type=int, default=3)
    parser.add_argument("--rank-multiple", type=int,
                        help="ranks are a multiple of this (default: the trainer's --tp x --pp)")
    parser.add_argument("--launcher", choices=["mpiexec", "srun"], default="mpiexec")
    parser.add_argument("--mpiexec", default="/usr/bin/mpiexec.mpich")
    parser.add_argument("--requeue", action="store_true", help="under SLURM: requeue the job when restarts run out")
    parser.add_argument("--log", help="append one JSON line per attempt to this file")
    parser.add_argument("--fault-plan", help=argparse.SUPPRESS)
    parser.add_argument("trainer", nargs=argparse.REMAINDER, help="-- TRAINER ARGS...")
    opts = parser.parse_args()
    trainer = opts.trainer[1:] if opts.trainer[:1] == ["--"] else opts.trainer
    if not trainer:
        parser.error("no trainer: elastic_run.py [options] -- TRAINER ARGS...")
    if flag_value(trainer, "resume-checkpoint") is not None:
        parser.error("the launcher adds --resume-checkpoint itself: leave it out of the trainer's arguments")
    group = opts.rank_multiple or int(flag_value(trainer, "tp", "1")) * int(flag_value(trainer, "pp", "1"))
    root = flag_value(trainer, "checkpoint-dir") or os.path.join(flag_value(trainer, "out", "result"), "checkpoints")
    plan = parse_fault_plan(opts.fault_plan)
    lost_to = None  # slots after a planned host loss

    def slots():
        if lost_to is not None:
            return lost_to
        if opts.ranks:
            return opts.ranks
        if opts.hostfile:
            return hostfile_slots(opts.hostfile)
        if os.environ.get("SLURM_NTASKS"):
            return int(os.environ["SLURM_NTASKS"])
        sys.exit("elastic_run: how many ranks? give --ranks or --hostfile, or run inside a SLURM allocation")

    def log(record):
        line = json.dumps(record)
        print("elastic_run: " + line, file=sys.stderr, flush=True)
        if opts.log:
            with open(opts.log, "a") as f:
                f.write(line + "\n")

    for attempt in range(opts.max_restarts + 1):
        available = slots()
        ranks = available // group * group
        if ranks < group:
            log({"attempt": attempt, "error": f"{available} slots cannot hold one group of {group} ranks"})
            return 1
        latest = latest_checkpoint(root)
        args = list(trainer) + (["--resume-checkpoint", latest[1]] if latest else [])
        if opts.launcher == "srun":
            command = ["srun", "-n", str(ranks)] + args
        else:
            command = [opts.mpiexec, "-n", str(ranks)] + (["-f", opts.hostfile] if opts.hostfile else []) + args
        env = dict(os.environ)
        if attempt < len(plan):
            env["TANDEM_FAULT_INJECT"] = f"rank={plan[attempt]['rank']},iteration={plan[attempt]['iteration']},action=kill"
        else:
            env.pop("TANDEM_FAULT_INJECT", None)
        start = time.time()
        status = subprocess.call(command, env=env)
        record = {"attempt": attempt, "slots": available, "ranks": ranks, "resumed_from": latest[1] if latest else None,
                  "exit": status, "seconds": round(time.time() - start, 3),
                  "command": " ".join(shlex.quote(c) for c in command)}
        log(record)
        if status == 0:
            return 0
        if attempt < len(plan) and "slots" in plan[attempt]:
            lost_to = int(plan[attempt]["slots"])
    log({"error": f"the trainer failed {opts.max_restarts + 1} times; giving up",
         "newest_checkpoint": (latest_checkpoint(root) or (None, None))[1]})
    if opts.requeue and os.environ.get("SLURM_JOB_ID"):
        subprocess.call(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]])
    return 1


if __name__ == "__main__":
    sys.exit(main())
