"""fuzz_equiv.py VIT3D [DRAWS [SEED [FIRST]]]: random feature combinations, each trained on a
random mesh of 4 or 8 CPU ranks and on one rank, must be the same computation
(tests/compare_runs.py: every step's loss and every final parameter, the EMA where there is one,
and the evaluations).

test_equiv.sh holds the layouts and features one at a time or in chosen pairs; a draw here mixes
a model variant (pooling head, class token, registers, LayerScale, QK-norm, parallel blocks, the
activation, pre-logits, positions, pre-norm, initialisation), regularisation (drop path, the
dropouts, Mixup and CutMix, random erasing, label smoothing or BCE), an optimizer with its
clipping, layer-wise decay, frozen tensors and the EMA, and the mesh's own choices (ZeRO-1,
sequence parallelism, the pipeline schedule, recompute, the mesh order, the decoding split),
sometimes the image loader with its augmentations and an evaluation every 2 steps, bf16 (on
pipeline stages only the very bits, on meshes with TP or DP within compare_runs.py's bands
against the one-rank run's fp32 twin, a third run), and sometimes a checkpoint after step 2
resumed on another mesh (or one rank), so that features which meet nowhere in the fixed tests
meet here. Flags the trainer refuses for a draw are printed and the draw counted as refused,
not failed (a refusal names its reason), unless every draw is refused. A failing draw prints
the commands that repeat it; FIRST starts at that draw (`fuzz_equiv.py VIT3D 1 SEED D` draws D
again).

Default test equiv_fuzz: 12 draws of a fixed seed (30 s to a minute); longer hunts:
  /usr/bin/python3 tests/fuzz_equiv.py build/vit3d 40 $RANDOM
FUZZ_WORLD=tcp runs every draw in the world without MPI (launch/spawn.sh, VT_WORLD=tcp: its
ranks meet over TCP, the one-rank runs too) instead of under mpirun.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_mpi_yield_when_idle="1")


COMMON = ["--model", "tiny", "--heads", "4", "--depth", "8", "--width", "32", "--steps", "4",
          "--global-batch-size", "16", "--micro-batch-size", "2", "--warmup-steps", "1",
          "--threads", "1", "--log-interval", "4"]


def maybe(r, f, p, *flags):
    """Appends flags to f with probability p (one draw of r either way)."""
    if r.random() < p:
        f += flags


def draw_model(r, imgs):
    """Model and training flags: the same on one rank and on the mesh."""
    f = ["--seed", str(r.randrange(1000))]
    if imgs and r.random() < 0.4:  # the image loader and its augmentations, an evaluation
        f += ["--data", imgs, "--val-data", imgs, "--num-classes", "4", "--eval-interval", "2"]
        aug = r.random()
        if aug < 0.3:
            f += ["--aa", "rand-m9-mstd0.5-inc1"]
        elif aug < 0.5:
            f += ["--three-augment", "1", "--simple-crop", "1", "--train-interpolation",
                  "bicubic"]
        elif aug < 0.6:
            f += ["--train-interpolation", "bilinear"]
        elif aug < 0.7:
            f += ["--color-jitter", "0.4"]
        maybe(r, f, 0.3, "--aug-repeats", "3")
        maybe(r, f, 0.3, "--drop-last", "1")
        maybe(r, f, 0.3, "--eval-hflip", "1")
        maybe(r, f, 0.3, "--eval-interpolation", "bicubic")
    pool = r.choice(["token", "token", "avg", "gap", "map"])
    f += ["--global-pool", pool]
    if pool != "token":
        maybe(r, f, 0.5, "--class-token", "0")
    for flag in ("--reg-tokens 2", "--no-embed-class 1", "--layer-scale 0.1", "--qk-norm 1",
                 "--qkv-bias 0", "--parallel-blocks 1"):
        maybe(r, f, 0.3, *flag.split())
    f += ["--act", r.choice(["gelu", "gelu", "gelu_tanh", "quick_gelu"])]
    maybe(r, f, 0.2, "--pre-logits", "16")
    if r.random() < 0.2:  # (positions on the patch tokens only)
        f += ["--pos-embed", "sincos2d"]
        if "--no-embed-class" not in f:
            f += ["--no-embed-class", "1"]
    maybe(r, f, 0.2, "--pre-norm", "1")
    maybe(r, f, 0.3, "--weight-init", "jax")
    for flag, value, p in (("--drop-path", "0.2", 0.4), ("--proj-drop", "0.1", 0.25),
                           ("--attn-drop", "0.1", 0.25), ("--pos-drop", "0.1", 0.2),
                           ("--drop", "0.1", 0.2), ("--mixup", "0.8", 0.25),
                           ("--cutmix", "1.0", 0.25), ("--reprob", "0.25", 0.2),
                           ("--model-ema", "0.9", 0.3)):
        maybe(r, f, p, flag, value)
    maybe(r, f, 0.2, "--bce-loss", "1")
    f += ["--label-smoothing", r.choice(["0", "0.1"])]
    opt = r.choice(["adamw", "adamw", "lamb", "sgd", "momentum", "lars", "nlarc"])
    if "jax" in f:
        # jax's head starts at zero: the first logits are uniform, and a class with its share
        # of a batch's labels has a head bias gradient of zero in exact arithmetic, rounding
        # noise of 1e-8 here. Adam-like steps turn that into a step of lr of either sign, and
        # the runs part (seen: head.bias 4.4e-4 apart, then fc_norm and fc2): momentum SGD
        # keeps the noise at noise's size.
        opt = r.choice(["sgd", "momentum"])
    f += ["--opt", opt, "--lr", "1e-3" if opt in ("adamw", "lamb") else "0.05"]
    f += ["--clip-grad", r.choice(["1", "0", "0.05"])]
    maybe(r, f, 0.3, "--layer-decay", "0.75")
    frozen = r.random()
    if frozen < 0.15:
        f += ["--freeze", r"^(patch_embed|cls_token|pos_embed|reg_token|blocks\.[01]\.)"]
    elif frozen < 0.25:
        f += ["--freeze", r"norm"]
    return f


def draw_mesh(r, sizes=(4, 4, 8), depth=8):
    """A mesh of one of sizes' rank counts and its own choices (nothing a one-rank run has)."""
    np_ = r.choice(sizes)
    layouts = [(t, p, np_ // (t * p)) for t in (1, 2, 4) for p in (1, 2, 4, 8)
               if np_ % (t * p) == 0 and t * p <= np_]
    tp, pp, dp = r.choice(layouts)
    f = ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp)]
    if dp > 1:
        maybe(r, f, 0.5, "--zero", "1")
    if tp > 1:
        maybe(r, f, 0.5, "--sequence-parallel", "1")
    sched = "1f1b"
    if pp > 1:
        # (interleaved and zb-v: 2 chunks a stage, each of at least one block)
        two = ["interleaved", "zb-v"] if 2 * pp <= depth else []
        sched = r.choice(["1f1b", "gpipe", "zb-h1"] + two)
        f += ["--pp-schedule", sched]
    if not sched.startswith("zb") and r.random() < 0.3:
        f += ["--recompute-blocks", r.choice(["1", "99"])]
    maybe(r, f, 0.3, "--mesh-order", "tp-pp-dp")
    if tp > 1:
        maybe(r, f, 0.3, "--decode-split", "0")
    return np_, f


def eval_figures(run_dir):
    """(step, eval loss, top-1, top-5) of each evaluation in a run's metrics.jsonl."""
    out = []
    for line in open(run_dir + "/metrics.jsonl"):
        m = json.loads(line)
        if "eval_loss" in m:
            out.append((m["step"], m["eval_loss"], m["eval_top1"], m["eval_top5"]))
    return out


def same_evals(a, b, twin=None):
    """Whether two runs' evaluations agree, and what differs: the same steps, each loss within
    compare_runs.py's 1e-5 and the same hits; or with twin (a's fp32 twin: bf16 runs that sum in
    other orders) each loss within compare_runs.py's band (LOSS_BAND_RATIO times the largest
    distance of a's losses from the twin's, plus 1e-7; the hits are not compared: a near tie may
    go either way)."""
    from compare_runs import LOSS_BAND_RATIO  # (numpy: main() checks it first)
    ea, eb = eval_figures(a), eval_figures(b)
    et = eval_figures(twin) if twin else ea
    ok = len(ea) == len(eb) == len(et) and all(x[0] == y[0] == t[0] for x, y, t in zip(ea, eb, et))
    if ok and twin:
        scale = max((abs(x[1] - t[1]) / abs(x[1]) for x, t in zip(ea, et)), default=0.0)
        ok = all(abs(x[1] - y[1]) / abs(x[1]) <= LOSS_BAND_RATIO * scale + 1e-7
                 for x, y in zip(ea, eb))
    elif ok:
        ok = all(abs(x[1] - y[1]) <= 1e-5 * abs(x[1]) and x[2:] == y[2:] for x, y in zip(ea, eb))
    return ok, "" if ok else f"    evaluations differ: {ea} vs {eb}" + (
        f" (fp32 twin {et})" if twin else "")


def same_run(base, other, label, flags, twin=None):
    """Whether run other is run base's computation, and what the checks printed: compare_runs.py
    on the weights (and the EMA with --model-ema), then the evaluations (with --val-data); twin:
    base's fp32 twin, for the bf16 bands."""
    band = ["--band", twin] if twin else []
    out = []
    for name, file in ((label, []), (label + " EMA", ["ema.safetensors"])):
        if file and "--model-ema" not in flags:
            continue
        p = subprocess.run([sys.executable, f"{HERE}/compare_runs.py", base, other, name] + file +
                           band, stdout=subprocess.PIPE, text=True)
        out.append(p.stdout.rstrip())
        if p.returncode != 0:
            return False, "\n".join(out)
    if "--val-data" in flags:
        ok, why = same_evals(base, other, twin)
        if not ok:
            return False, "\n".join(out + [why])
    return True, "\n".join(out)


def run(vit3d, np_, flags, out):
    # One rank through mpirun too (as test_equiv.sh): Open MPI's singleton start, without it,
    # failed once in about 450 runs beside the others ("MPI_Init_thread on a NULL communicator").
    tcp = os.environ.get("FUZZ_WORLD") == "tcp"
    launcher = ([f"{HERE}/../launch/spawn.sh", str(np_)] if tcp else
                ["mpirun", "-np", str(np_), "--oversubscribe"])
    cmd = launcher + [vit3d, "train"] + COMMON + flags + [
        "--log-dir", out, "--final-weights", out + "/weights.safetensors"]
    if "--model-ema" in flags:
        cmd += ["--final-ema", out + "/ema.safetensors"]
    env = dict(ENV, VT_WORLD="tcp") if tcp else ENV
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    return p.returncode, p.stdout, ("VT_WORLD=tcp " if tcp else "") + " ".join(cmd)


def make_image_folder(work, vit3d):
    """tests/make_images.py's 4 classes of 8 images in work/imgs, or None without Pillow or
    where vit3d cannot decode them (tests/needs_images.sh: a build without libpng)."""
    imgs = f"{work}/imgs"
    if subprocess.run(["bash", f"{HERE}/needs_images.sh", vit3d],
                      stdout=subprocess.DEVNULL).returncode != 0:
        print("no image folder (this vit3d cannot decode PNG and JPEG): synthetic data only")
        return None
    try:
        import PIL  # noqa: F401 (make_images.py's)
        subprocess.run([sys.executable, f"{HERE}/make_images.py", imgs, "4", "8", "40"],
                       check=True)
    except (ImportError, subprocess.CalledProcessError) as e:
        print(f"no image folder ({e}): synthetic data only")
        return None
    return imgs


def refusal(logs):
    """The first refusal message ("vit3d train: ...") of the runs' logs."""
    why = [ln for ln in "\n".join(logs).splitlines() if ln.startswith("vit3d")][:1]
    return why[0] if why else "(no message)"


# A line that says why a run ended: the emulation's, a check's "file:line:", an error.
ERROR_LINE = re.compile(r"^emulated |^emu: |error|\.(c|cu|cpp):[0-9]+:")


def print_failure(head, runs, imgs, detail=""):
    """A failed draw: its runs' exit codes, the commands that repeat it and their last lines.
    runs: (name, exit code, command, log) per run."""
    codes = ", ".join(f"{rc} ({name})" for name, rc, _, _ in runs)
    cmds = "".join(f"\n    {cmd}" for _, _, cmd, _ in runs)
    print(f"FAIL: {head}\n  exit codes {codes}; repeat (IMGS: tests/make_images.py IMGS 4 8 "
          f"40):{cmds}".replace(imgs or "\0", "IMGS"))
    if detail:
        print("    " + "\n    ".join(detail.strip().splitlines()[-12:]))
    for name, _, _, log in runs:
        lines = log.strip().splitlines()
        # The message that ended a run (mpirun's own lines come after it), then the log's end.
        why = [ln for ln in lines[:-5] if ERROR_LINE.search(ln)][:3]
        if why:
            print(f"  messages ({name}):\n    " + "\n    ".join(why))
        print(f"  last lines ({name}):\n    " + "\n    ".join(lines[-5:]))


def main():
    try:
        import numpy  # noqa: F401 (compare_runs.py's)
    except ImportError:
        print(f"SKIP: {sys.executable} cannot import numpy")
        return 77
    vit3d = os.path.abspath(sys.argv[1])
    draws = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20261205
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    work = tempfile.mkdtemp(prefix="vt_fuzz_equiv_")
    failed = refused = passed = 0
    imgs = make_image_folder(work, vit3d)
    try:
        for d in range(first, first + draws):
            r = random.Random(seed * 1000 + d)
            model = draw_model(r, imgs)
            np_, mesh = draw_mesh(r)
            # bf16: where a mesh must give one rank's very bits (pipeline stages only), half the
            # draws; on meshes with TP or DP, which sum in other orders (a sum next to a bf16
            # rounding boundary rounds the other way), half too, held to compare_runs.py's bands
            # against the one-rank run's fp32 twin
            banded = None
            if mesh[1] == "1" and mesh[5] == "1":
                if r.random() < 0.5:
                    model += ["--precision", "bf16"]
            elif r.random() < 0.5:
                banded = list(model)  # the fp32 twin's flags
                model += ["--precision", "bf16"]
            head = f"draw {d} (seed {seed}): {' '.join(model)} | {' '.join(mesh)}"
            if imgs:
                head = head.replace(imgs, "IMGS")
            base, other = f"{work}/{d}_base", f"{work}/{d}_mesh"
            rc_b, log_b, cmd_b = run(vit3d, 1, model, base)
            if r.random() < 0.3:  # saved after step 2 there, resumed on another mesh
                np2, mesh2 = draw_mesh(r) if r.random() < 0.7 else (1, [])
                while "bf16" in model and banded is None and mesh2 and (mesh2[1] != "1" or
                                                                    mesh2[5] != "1"):
                    np2, mesh2 = draw_mesh(r)  # (pipeline stages only, as above)
                ckpt = ["--save", f"{work}/{d}_ckpt"]
                head += f" | resumed at step 2 on: {' '.join(mesh2) or 'one rank'}"
                rc_m, log_m, cmd_m = run(vit3d, np_, model + mesh + ckpt + ["--run-steps", "2"],
                                         other)
                if rc_m == 0:
                    rc_m, log2, cmd2 = run(vit3d, np2, model + mesh2 + ckpt + ["--resume", "auto"],
                                           other)
                    log_m, cmd_m = log_m + log2, cmd_m + "\n    " + cmd2
                    # (a --resume auto that found no checkpoint would start again from step 0
                    # and end with the same figures)
                    if rc_m == 0 and "resumed from" not in log2:
                        rc_m, log_m = 1, log_m + "\nthe second run did not resume from step 2"
            else:
                rc_m, log_m, cmd_m = run(vit3d, np_, model + mesh, other)
            if rc_b == 2 or rc_m == 2:  # a refusal of the flags (vt_train_validate)
                print(f"refused: {head}\n    {refusal((log_b, log_m))}")
                refused += 1
                continue
            runs = [("one rank", rc_b, cmd_b, log_b), ("mesh", rc_m, cmd_m, log_m)]
            twin = None
            if banded is not None and rc_b == 0 and rc_m == 0:  # the one-rank run's fp32 twin
                twin = f"{work}/{d}_fp32"
                rc_t, log_t, cmd_t = run(vit3d, 1, banded, twin)
                runs.append(("one rank fp32", rc_t, cmd_t, log_t))
                head += " | bf16 bands"
            ok, checks = all(rc == 0 for _, rc, _, _ in runs), ""
            if ok:
                ok, checks = same_run(base, other, f"draw {d}", model, twin)
            if ok:
                passed += 1
                print(f"{checks}\nok: {head}")
            else:
                failed += 1
                print_failure(head, runs, imgs, checks)
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} same, {failed} different, {refused} refused of {draws} draws (seed {seed})")
    return 1 if failed or (refused == draws and draws > 0) else 0


if __name__ == "__main__":
    sys.exit(main())
