"""fuzz_cuda_train.py VIT3D_EMU VIT3D [DRAWS [SEED [FIRST]]]: random feature combinations trained
with `--device cuda` on the CUDA emulation (tests/cuda_emu: vit3d_emu) must follow the same run
on the CPU.

The CUDA kernels run nowhere else before a GPU is lent; test_cuda_train_emu.sh and
test_cuda_mesh_emu.sh hold chosen variant sets and meshes, and a draw here mixes the model,
regularisation, optimizer, frozen tensors, EMA and image-loader features of tests/fuzz_equiv.py
(draw_model) in fp32 or bf16, on one rank or (half the draws) a mesh of 2 or 4 ranks with one
emulated GPU each (draw_mesh; the CPU run on the same mesh), sometimes with recompute on the CUDA
side only, and with its own order of the emulated device running ahead (EMU_SEED, emu_runtime.cpp's
run_ahead: streams' work that nothing orders runs in other orders). fp32: tests/compare_runs.py's
rules (every step's loss within 1e-5, every parameter within 5e-5, the EMA too, the evaluations'
loss within 1e-5 and the same hits); bf16 (where the CUDA GEMMs sum in other orders than the CPU's,
so a sum next to a bf16 rounding boundary may round the other way): compare_runs.py's bands against
the CPU run's fp32 twin (a third run: every loss, parameter and EMA tensor and the evaluations'
losses within a few times the twin's distance, as fuzz_equiv.py's banded draws). A failing draw
prints the commands that repeat it; `fuzz_cuda_train.py EMU VIT3D 1 SEED D` draws D again.

The default run's cuda_train_fuzz takes 12 draws of the default seed (46 s on 2 cores); hunts:
  /usr/bin/python3 tests/fuzz_cuda_train.py build/tests/vit3d_emu build/vit3d 100 $RANDOM
FUZZ_WORLD=tcp starts the emulated runs by launch/spawn.sh (the TCP world without MPI, NCCL
emulated over its own sockets either way); the CPU runs stay under mpirun.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fuzz_equiv import (draw_mesh, draw_model, make_image_folder, print_failure,  # noqa: E402
                        refusal, same_run)

COMMON = ["--model", "tiny", "--heads", "4", "--depth", "4", "--width", "32", "--steps", "3",
          "--global-batch-size", "16", "--micro-batch-size", "4", "--warmup-steps", "1",
          "--threads", "1", "--log-interval", "1"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_mpi_yield_when_idle="1")


def run(binary, np_, flags, out, emu_seed=0):
    """A run of np_ ranks (one emulated GPU each: EMU_GPUS, chosen by local rank; EMU_SEED the
    draw's order of the device running ahead, emu_runtime.cpp); with FUZZ_WORLD=tcp the emulated
    runs start by launch/spawn.sh (the TCP world, no MPI)."""
    tcp = os.environ.get("FUZZ_WORLD") == "tcp" and binary.endswith("vit3d_emu")
    launcher = ([f"{HERE}/../launch/spawn.sh", str(np_)] if tcp else
                ["mpirun", "-np", str(np_), "--oversubscribe", "-x", "EMU_GPUS", "-x", "EMU_SEED"])
    cmd = launcher + [binary, "train"] + \
        COMMON + flags + ["--log-dir", out, "--final-weights", out + "/weights.safetensors"]
    if "--model-ema" in flags:
        cmd += ["--final-ema", out + "/ema.safetensors"]
    env = dict(ENV, EMU_GPUS=str(np_), EMU_SEED=str(emu_seed),
               **({"VT_WORLD": "tcp"} if tcp else {}))
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=1800)
    return p.returncode, p.stdout, ("VT_WORLD=tcp " if tcp else "") + \
        f"EMU_GPUS={np_} EMU_SEED={emu_seed} " + " ".join(cmd)


def main():
    try:
        import numpy  # noqa: F401 (compare_runs.py's)
    except ImportError:
        print(f"SKIP: {sys.executable} cannot import numpy")
        return 77
    emu, vit3d = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    draws = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 20261205
    first = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    work = tempfile.mkdtemp(prefix="vt_fuzz_cuda_")
    imgs = make_image_folder(work, vit3d)
    failed = refused = passed = 0
    try:
        for d in range(first, first + draws):
            r = random.Random(seed * 1000 + d)
            model = draw_model(r, imgs)
            bf16 = r.random() < 0.5
            model += ["--precision", "bf16" if bf16 else "fp32"]
            # Half the draws on a mesh of 2 or 4 ranks, the CPU run on the same one: the NCCL
            # transport (emulated over TCP) on its axes, the streams of its schedule.
            np_, mesh = draw_mesh(r, (2, 2, 4), 4) if r.random() < 0.5 else (1, [])
            cuda_only = ["--recompute-blocks", "2"] if r.random() < 0.3 and not any(
                "zb" in x for x in mesh) else []
            head = (f"draw {d} (seed {seed}): {' '.join(model)} | {' '.join(mesh) or 'one rank'}"
                    f" | cuda {' '.join(cuda_only)}")
            if imgs:
                head = head.replace(imgs, "IMGS")
            cpu, cuda = f"{work}/{d}_cpu", f"{work}/{d}_cuda"
            rc_c, log_c, cmd_c = run(vit3d, np_, model + mesh + ["--device", "cpu"], cpu)
            rc_g, log_g, cmd_g = run(emu, np_, model + mesh + cuda_only + ["--device", "cuda"],
                                     cuda, emu_seed=seed * 1000 + d)
            if rc_c == 2 or rc_g == 2:
                print(f"refused: {head}\n    {refusal((log_c, log_g))}")
                refused += 1
                continue
            runs = [("cpu", rc_c, cmd_c, log_c), ("emulated cuda", rc_g, cmd_g, log_g)]
            twin = None
            if bf16 and rc_c == 0 and rc_g == 0:  # the CPU run's fp32 twin
                twin = f"{work}/{d}_fp32"
                rc_t, log_t, cmd_t = run(vit3d, np_, model[:-2] + ["--precision", "fp32"] + mesh
                                         + ["--device", "cpu"], twin)
                runs.append(("cpu fp32", rc_t, cmd_t, log_t))
            ok, checks = all(rc == 0 for _, rc, _, _ in runs), ""
            if ok:
                ok, checks = same_run(cpu, cuda, f"draw {d}", model, twin)
            if ok:
                passed += 1
                print(f"{checks}\nok: {head}")
            else:
                failed += 1
                print_failure(head, runs, imgs, checks)
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} follow, {failed} apart, {refused} refused of {draws} draws (seed {seed})")
    return 1 if failed or (refused == draws and draws > 0) else 0


if __name__ == "__main__":
    sys.exit(main())
