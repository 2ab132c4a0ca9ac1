#!/usr/bin/env python3
"""What ptxas makes of every CUDA kernel: registers, spills, stack frame and static shared memory
per kernel, from `nvcc -Xptxas -v` on each .cu (no GPU needed), and two rules that fail the test:

  - no local-memory array: a stack frame larger than the kernel's spill stores (rounded up to 8
    bytes) is an array that ptxas could not keep in registers, most often one indexed by a value
    known only at run time (c.v[i & 3] on a Philox block cost a 16-byte store and load per
    number in every dropout kernel); every access goes through the L1 cache to device memory;
  - spills of at most SPILL_MAX bytes: a few bytes are ptxas trading registers for occupancy,
    more means a kernel outgrew its registers.

usage: kernel_resources.py NVCC ARCH FILE.cu... -- NVCC_FLAGS...   (label unit; CMake passes the
build's include directories and defines). Prints the table, then the findings.
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

SPILL_MAX = 64

ENTRY = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def compile_report(nvcc, arch, src, flags, tmp):
    obj = os.path.join(tmp, os.path.basename(src) + ".o")
    cmd = [nvcc, "-O3", "-std=c++17", f"--generate-code=arch=compute_{arch},code=[sm_{arch}]",
           "-Xptxas", "-v", "-c", src, "-o", obj] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kernel_resources: nvcc failed on {src}:\n{r.stderr[-4000:]}")
    return r.stderr


def parse(text):
    """(mangled name, frame, spill stores, spill loads, registers, smem) per kernel."""
    kernels, name, frame = [], None, None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            name, frame = m.group(1), None
            continue
        m = FRAME.search(line)
        if m and name:
            frame = tuple(int(v) for v in m.groups())
            continue
        m = USED.search(line)
        if m and name and frame:
            kernels.append((name,) + frame + (int(m.group(1)), int(m.group(2) or 0)))
            name = None
    return kernels


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool:
        return names
    r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    out = r.stdout.splitlines()
    return out if len(out) == len(names) else names


def main():
    if "--" not in sys.argv or len(sys.argv) < 5:
        sys.exit(__doc__)
    cut = sys.argv.index("--")
    nvcc, arch, sources, flags = sys.argv[1], sys.argv[2], sys.argv[3:cut], sys.argv[cut + 1:]
    with tempfile.TemporaryDirectory() as tmp:
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            texts = list(pool.map(lambda s: compile_report(nvcc, arch, s, flags, tmp), sources))
    rows = []
    for src, text in zip(sources, texts):
        rows += [(os.path.basename(src),) + k for k in parse(text)]
    if not rows:
        sys.exit("kernel_resources: no ptxas report in nvcc's output (did its -v output change?)")
    names = demangle([r[1] for r in rows])
    findings = []
    print(f"{'file':22} {'regs':>4} {'frame':>5} {'spill':>5} {'smem':>6}  kernel (sm_{arch})")
    for (src, _, frame, st, ld, regs, smem), name in zip(rows, names):
        short = re.sub(r"\(.*", "", name)
        print(f"{src:22} {regs:4} {frame:5} {st:5} {smem:6}  {short}")
        if frame - (st + 7) // 8 * 8 >= 8:
            findings.append(f"{src}: {short}: a {frame}-byte stack frame with {st} bytes of "
                            "spills: an array in local memory (an index known only at run time?)")
        if st > SPILL_MAX or ld > SPILL_MAX:
            findings.append(f"{src}: {short}: spills {st} bytes (stores) and {ld} (loads), more "
                            f"than {SPILL_MAX}: fewer values live at once, or a smaller tile")
    print(f"{len(rows)} kernels in {len(sources)} files")
    for f in findings:
        print("FAIL " + f)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
