"""tfevents_check.py DIR METRICS [--corrupt]: the TensorBoard event files vit3d wrote in DIR
against a metrics.jsonl (METRICS, of the same run or of an uninterrupted one).

Two readers, both independent of vit3d's writer:
  - this file's own: TFRecord framing (little-endian length, masked CRC-32C of the length, the
    bytes, masked CRC-32C of the bytes: every checksum verified) and the protocol-buffer fields of
    Event (wall_time 1, step 2, file_version 3, summary 5 of Value tag 1 / simple_value 2,
    session_log 7 of status 1), with TensorBoard's rule for restarts: a SessionLog START at step s
    drops what earlier files logged at steps >= s;
  - TensorBoard's own EventAccumulator, where `tensorboard` imports (else said and skipped).
Each must give, for every step of METRICS (its last line per step), train/loss, train/lr and
train/grad_norm (and eval/*, eval_ema/* where logged) equal to METRICS' figures as float32
within what METRICS' printed digits allow (9 significant digits: relative 2e-7; accuracies 6
decimals: 5e-7). --corrupt: flips a byte of the first file's last record
in a copy and wants the own reader to refuse it (a check of the checker). Exit 0 = pass.
"""
import glob
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def fields(b):
    """(field, wire type, value) of a message: ints for varints, bytes otherwise."""
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {w}")
        yield f, w, v


def records(path):
    blob = open(path, "rb").read()
    i = 0
    while i < len(blob):
        if i + 12 > len(blob):
            raise ValueError(f"{path}: cut record header at byte {i}")
        n = struct.unpack("<Q", blob[i:i + 8])[0]
        if struct.unpack("<I", blob[i + 8:i + 12])[0] != masked(crc32c(blob[i:i + 8])):
            raise ValueError(f"{path}: length CRC wrong at byte {i}")
        data = blob[i + 12:i + 12 + n]
        crc = blob[i + 12 + n:i + 16 + n]
        if len(data) != n or len(crc) != 4 or struct.unpack("<I", crc)[0] != masked(crc32c(data)):
            raise ValueError(f"{path}: data CRC wrong (or cut) in the record at byte {i}")
        yield data
        i += 16 + n


def own_scalars(files):
    """{tag: {step: value}} after TensorBoard's purges, and the number of START events."""
    out, starts = {}, 0
    for path in files:
        for k, data in enumerate(records(path)):
            step, summary, version, start = 0, None, None, False
            for f, w, v in fields(data):
                if f == 2:
                    step = v
                elif f == 3:
                    version = v.decode()
                elif f == 5:
                    summary = v
                elif f == 7:
                    start = any(ff == 1 and vv == 1 for ff, _, vv in fields(v))
            if k == 0 and version != "brain.Event:2":
                raise ValueError(f"{path}: first event is not file_version brain.Event:2")
            if start:
                starts += 1
                for by_step in out.values():
                    for s in [s for s in by_step if s >= step]:
                        del by_step[s]
            for f, w, v in fields(summary or b""):
                tag, val = None, None
                for ff, ww, vv in fields(v):
                    if ff == 1:
                        tag = vv.decode()
                    elif ff == 2 and ww == 5:
                        val = struct.unpack("<f", vv)[0]
                if step in out.setdefault(tag, {}):  # a restart without its START event
                    raise ValueError(f"{path}: {tag} at step {step} a second time, with no "
                                     "SessionLog START before it")
                out[tag][step] = val
    return out, starts


def tensorboard_scalars(logdir):
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
    except Exception as e:  # not installed, or an incompatible protobuf
        return None, f"{type(e).__name__}: {e}"
    acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {t: {s.step: s.value for s in acc.Scalars(t)} for t in acc.Tags()["scalars"]}, None


def want_from(metrics):
    by_step = {}
    for line in open(metrics):
        row = json.loads(line)
        by_step[row["step"]] = row
    want = {}
    keys = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
            "eval_loss": "eval/loss", "eval_top1": "eval/top1", "eval_top5": "eval/top5",
            "eval_ema_loss": "eval_ema/loss", "eval_ema_top1": "eval_ema/top1"}
    for step, row in by_step.items():
        for k, tag in keys.items():
            if row.get(k) is not None:
                want.setdefault(tag, {})[step] = float(np.float32(row[k]))
    return want


def compare(name, got, want):
    worst, missing = 0.0, []
    for tag, steps in want.items():
        for s, v in steps.items():
            g = got.get(tag, {}).get(s)
            if g is None:
                missing.append(f"{tag}@{s}")
                continue
            # metrics.jsonl prints accuracies with 6 decimals, other figures with 9 digits
            d = abs(g - v) / (5e-7 if "top" in tag else 2e-7 * max(abs(v), 1e-30))
            worst = max(worst, d)
    extra = sorted(s for s in got.get("train/loss", {}) if s not in want.get("train/loss", {}))
    ok = not missing and not extra and worst <= 1.0
    n = sum(len(v) for v in want.values())
    print(f"{name}: {n} scalars of {len(want.get('train/loss', {}))} steps ({', '.join(sorted(want))}): "
          f"largest difference {worst:.2f} of what the printed digits allow" +
          (f"; missing {missing[:4]}" if missing else "") +
          (f"; steps not in the metrics {extra[:4]}" if extra else "") + (" ok" if ok else " FAIL"))
    return ok


def main():
    logdir, metrics = sys.argv[1], sys.argv[2]
    files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
    if not files:
        print(f"FAIL: no event files in {logdir}")
        return 1
    want = want_from(metrics)
    if "--corrupt" in sys.argv:
        tmp = tempfile.mkdtemp()
        bad = os.path.join(tmp, os.path.basename(files[0]))
        shutil.copy(files[0], bad)
        blob = bytearray(open(bad, "rb").read())
        blob[-6] ^= 0x01
        open(bad, "wb").write(bytes(blob))
        try:
            own_scalars([bad])
            print("FAIL: a flipped byte in an event file went unnoticed")
            return 1
        except ValueError as e:
            print(f"a flipped byte is refused: {e}")
        finally:
            shutil.rmtree(tmp)
    try:
        got, starts = own_scalars(files)
    except ValueError as e:
        print(f"FAIL: {e}")
        return 1
    ok = compare(f"own reader, {len(files)} file(s), {starts} restart(s)", got, want)
    tb, why = tensorboard_scalars(logdir)
    if tb is None:
        print(f"TensorBoard's reader skipped (tensorboard does not import: {why})")
    else:
        ok = compare("TensorBoard's EventAccumulator", tb, want) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
