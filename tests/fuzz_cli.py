"""fuzz_cli.py VIT3D [DRAWS [SEED]]: random flag values never crash vit3d.

Each draw gives a one-rank `vit3d train` of the tiny model (or `vit3d plan`, `vit3d eval`) one to
three flags from its own --help, each with a value from a pool of edge cases (zero, negative,
huge, fractional, NaN, infinity, empty, text, lists, missing paths) or, more often, one a run
may accept (the choices the help lists, small numbers of the default's kind). The run must end
by itself with an exit code of its own (0, or a refusal or failure with a message on stderr): a
signal (an abort, a segmentation fault), an internal check's file:line message, or no end
within the time limit is a finding, printed with the command that repeats it. Flags that run
commands or write outside the draw's folder are left out; the run's length (--steps, --epochs)
is fixed at one step.

Default test cli_fuzz: 60 draws of a fixed seed; longer hunts:
  /usr/bin/python3 tests/fuzz_cli.py build/vit3d 2000 $RANDOM
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

POOL = ["0", "1", "-1", "2", "3", "7", "16", "65537", "2147483648", "99999999999999999999",
        "0.5", "-0.5", "1e-30", "1e30", "nan", "inf", "-inf", "", "x", "1,2", "1,2,3", "0,0,0",
        "-1,-1,-1", " 1", "1 ", "0x10", "1e3", "9" * 400]
# Not drawn: commands (--save-hook), the run's length, and flags that pick the mode's inputs
# (kept below) or point at files other than the draw's folder (given there instead).
SKIP = {"--save-hook", "--steps", "--epochs", "--run-steps", "--help", "--model", "--threads",
        "--loader-threads", "--timeout-s", "--save-hook-timeout"}
PATHS = {"--save", "--log-dir", "--final-weights", "--final-ema", "--predictions",
         "--logits-out", "--index-cache", "--check-log", "--resume", "--resume-fallback", "--init-from",
         "--checkpoint", "--data", "--val-data", "--label-names"}
BASE = ["--model", "tiny", "--steps", "1", "--micro-batch-size", "2", "--threads", "1",
        "--loader-threads", "1", "--timeout-s", "30"]


def flags_of(vit3d):
    """(flag, choices) for every flag of `vit3d train --help` (choices: the help's 'a|b|c')."""
    out = subprocess.run([vit3d, "train", "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True).stdout
    flags = []
    for line in out.splitlines():
        m = re.match(r"\s+(--[a-z0-9-]+)\s+(\S+)?\s+(.*)", line)
        if m and m.group(1) not in SKIP:
            words = re.findall(r"\b([a-z0-9_.-]+(?:\|[a-z0-9_.-]+)+)\b",
                               (m.group(2) or "") + " " + m.group(3))  # (the metavar first)
            choices = words[0].split("|") if words else []
            default = re.search(r"\[([^\]]*)\]$", m.group(3))
            if not choices and default and re.fullmatch(r"-?\d+", default.group(1)):
                choices = ["0", "1", "2", "4", "8"]  # a whole number
            elif not choices and default and re.fullmatch(r"-?[\d.e+-]+", default.group(1)):
                choices = ["0", "0.1", "0.5", "0.9", "1e-3", "1"]
            flags.append((m.group(1), choices))
    return flags


def value_for(r, flag, choices, work):
    if flag in PATHS:
        return r.choice([f"{work}/out", f"{work}/missing/x", work, "/proc/x", "", "synthetic"])
    if choices and r.random() < 0.7:  # values a run may accept, to reach past the checks
        return r.choice(choices)
    return r.choice(POOL)


def main():
    vit3d = os.path.abspath(sys.argv[1])
    draws = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20261205
    flags = flags_of(vit3d)
    if len(flags) < 50:
        print(f"FAIL: only {len(flags)} flags read from `vit3d train --help`")
        return 1
    findings = 0
    codes = {}
    work = tempfile.mkdtemp(prefix="vt_fuzz_cli_")
    try:
        for d in range(draws):
            r = random.Random(seed * 100003 + d)
            mode = r.choice(["train", "train", "train", "plan", "eval"])
            args = [vit3d, mode] + BASE
            for _ in range(r.randint(1, 3)):
                flag, choices = r.choice(flags)
                args += [flag, value_for(r, flag, choices, f"{work}/{d}")]
            os.makedirs(f"{work}/{d}", exist_ok=True)
            cmd = " ".join(a if a and " " not in a else repr(a) for a in args)
            try:
                p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, timeout=60, cwd=f"{work}/{d}")
                rc, err = p.returncode, p.stderr
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            codes[rc] = codes.get(rc, 0) + 1
            if os.environ.get("VT_FUZZ_VERBOSE"):
                print(f"{rc}: {cmd[len(vit3d):]}\n    {(err.strip().splitlines() or [''])[-1]}")
            internal = re.search(r"\b[\w/]+\.(c|cu|h):\d+: ", err)
            why = ("no end in 60 s" if rc == "timeout" else
                   f"signal {-rc}" if rc < 0 else f"exit code {rc}" if rc >= 128 else
                   "an internal check" if internal else
                   "no message" if rc != 0 and not err.strip() else None)
            if why:
                findings += 1
                tail = "\n    ".join(err.strip().splitlines()[-3:])
                print(f"FINDING ({why}): draw {d} (seed {seed}):\n  {cmd}\n    {tail}")
            shutil.rmtree(f"{work}/{d}", ignore_errors=True)
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = ", ".join(f"{n} x {c}" for c, n in sorted(codes.items(), key=str))
    print(f"{draws} draws (seed {seed}): {findings} findings; exit codes {summary}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
