"""timeline_check.py TRACE METRICS RANKS MICRO CHUNKS SPLIT DEVICE [NAME...]: checks a
--trace-steps timeline (launch/timeline.c) against its run.

The file must be one JSON object in Chrome's trace format with a named row for each of RANKS
ranks. On every rank, each traced step is one "step N" range on the host's track holding, for
each of MICRO micro-batches and CHUNKS model chunks, one forward and one backward pass (and one
weight pass where SPLIT is 1, the zero-bubble schedules), and one optimizer range; every range
lies inside its step's. With DEVICE 1 (a GPU's run) each row also has a device track (tid 1)
holding the same passes of each step, inside the host's step (the step ends with a wait for the
device), one after another (one stream); with DEVICE 0 it has none. The ranks of this host share
one clock, so where stage s + 1's forward of a micro-batch takes stage s's output it must start
after that forward ended, and the backwards the other way round (to the microsecond the file
prints), on the track that does the work (the device's where there is one: a GPU's host only
queues it, and its host ranges may well start before their inputs exist). A step's duration
must agree with metrics.jsonl's step_ms (within 50% + 10 ms: a loaded machine's scheduling; its
evaluation and checkpoint save left out: the range also holds the metrics and TensorBoard writes after it; a clock in the wrong
unit is off by a factor of 1000). Each NAME must be the name of some range (e.g. "evaluation",
"checkpoint save").
"""
import collections
import json
import re
import sys

path, metrics = sys.argv[1:3]
ranks, micro, chunks, split, device = (int(x) for x in sys.argv[3:8])
names_wanted = sys.argv[8:]
fails = []
doc = json.load(open(path))
events = doc["traceEvents"]
first, last = doc["otherData"]["first_step"], doc["otherData"]["last_step"]
rows = {e["pid"]: e["args"]["name"] for e in events
        if e["ph"] == "M" and e["name"] == "process_name"}
if sorted(rows) != list(range(ranks)):
    fails.append("rows %s, want ranks 0..%d" % (sorted(rows), ranks - 1))
coord = {p: tuple(int(x) for x in re.findall(r"(?:tp|pp|dp) (\d+)", n)) for p, n in rows.items()}
spans = [e for e in events if e["ph"] == "X"]
tracks = sorted({e["tid"] for e in spans})
if tracks != ([0, 1] if device else [0]):
    fails.append("tracks %s, want %s" % (tracks, [0, 1] if device else [0]))
step_ms = {json.loads(l)["step"]: json.loads(l)["step_ms"] for l in open(metrics)}
PASS = re.compile(r"(forward|backward|weight) mb (\d+) chunk (\d+)$")


def inside(e, s):
    return s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3


def want_passes():
    want = collections.Counter({"forward": micro * chunks, "backward": micro * chunks})
    if split:
        want["weight"] = micro * chunks
    return want


passes = {}  # (track, pid, step, kind, mb, chunk) -> event
for pid in rows:
    mine = [e for e in spans if e["pid"] == pid and e["tid"] == 0]
    gpu = [e for e in spans if e["pid"] == pid and e["tid"] == 1]
    for n in range(first, last + 1):
        steps = [e for e in mine if e["name"] == "step %d" % n]
        if len(steps) != 1:
            fails.append("rank %d: %d ranges named step %d" % (pid, len(steps), n))
            continue
        s = steps[0]
        within = [e for e in mine if e is not s and inside(e, s)]
        want = want_passes() + collections.Counter({"optimizer": 1})
        got = collections.Counter(e["name"].split(" mb")[0] for e in within
                                  if not e["name"].startswith(("send-recv", "evaluation",
                                                               "checkpoint save")))
        if got != want:
            fails.append("rank %d step %d: %s, want %s" % (pid, n, dict(got), dict(want)))
        on_gpu = [e for e in gpu if inside(e, s)]
        got = collections.Counter(e["name"].split(" mb")[0] for e in on_gpu)
        if device and got != want_passes():
            fails.append("rank %d step %d, device: %s, want %s"
                         % (pid, n, dict(got), dict(want_passes())))
        for track, evs in ((0, within), (1, on_gpu)):
            for e in evs:
                m = PASS.match(e["name"])
                if m:
                    passes[(track, pid, n, m.group(1), int(m.group(2)), int(m.group(3)))] = e
        # metrics.jsonl's step time ends before the evaluation and the save
        ms = (s["dur"] - sum(e["dur"] for e in within
                             if e["name"] in ("evaluation", "checkpoint save"))) / 1e3
        if n in step_ms and abs(ms - step_ms[n]) > 0.5 * step_ms[n] + 10:
            fails.append("rank %d step %d: %.2f ms in the timeline, %.2f in metrics.jsonl"
                         % (pid, n, ms, step_ms[n]))
    outside = [e for e in mine + gpu if not any(inside(e, s) for s in mine
                                                if re.match(r"step \d+$", s["name"]))]
    if outside:
        fails.append("rank %d: %s outside every step" % (pid, outside[0]["name"]))
    gpu.sort(key=lambda e: e["ts"])
    for a, b in zip(gpu, gpu[1:]):
        if round(1e3 * (a["ts"] + a["dur"])) > round(1e3 * b["ts"]):  # (in whole ns)
            fails.append("rank %d, device: %s and %s overlap" % (pid, a["name"], b["name"]))
            break
# Causality between neighbouring stages (non-interleaved: chunk 0 only), on the track that
# does the work: the device's on a GPU, whose host only queues it.
for track in (1,) if device else (0,):
    worst, pairs = -1e30, 0
    for (tr, pid, n, kind, mb, ch), e in passes.items():
        if tr != track or kind == "weight" or chunks != 1:
            continue
        tp, pp, dp = coord[pid]
        nxt = [q for q, c in coord.items() if c == (tp, pp + 1, dp)]
        f = passes.get((track, nxt[0], n, kind, mb, ch)) if nxt else None
        if f is None:
            continue
        before, after = (e, f) if kind == "forward" else (f, e)
        worst = max(worst, before["ts"] + before["dur"] - after["ts"])
        pairs += 1
    if chunks == 1 and coord and max(c[1] for c in coord.values()) > 0:
        what = "device" if track else "host"
        if pairs == 0:
            fails.append("%s: no neighbouring stages' passes to compare" % what)
        elif worst > 0.01:
            fails.append("%s: a pass starts %.3f us before the pass it waits for ends"
                         % (what, worst))
        else:
            print("ok: %s: %d pairs of passes across stages in order (closest %.1f us apart)"
                  % (what, pairs, -worst))
for name in names_wanted:
    if not any(e["name"] == name for e in spans):
        fails.append("no range named %r" % name)
for f in fails:
    print("FAIL:", f)
if not fails:
    print("ok: %s: %d ranks, steps %d-%d, %d ranges" % (path, ranks, first, last, len(spans)))
sys.exit(1 if fails else 0)
