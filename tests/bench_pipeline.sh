#!/usr/bin/env bash
# bench_pipeline.sh VIT3D [ROUNDS]: the pipeline bubble, measured, 1F1B against the interleaved
# schedule (2 model chunks per stage), ZB-H1 and ZB-V (its order built for the pass times it
# measures, and with --pp-pass-times equal) in the same run. For p = 2 and 4 stages and m = 8
# and 16 micro-batches per step, the five runs go in turn ROUNDS times (default 3) on the
# same model, data and seed (they compute the same losses); printed per schedule: the ideal idle
# ((p-1)/(v*m+p-1); ZB-H1 (p-1)/(3m+p-1); ZB-V (p-1)/(6m+p-1)), the idle the schedule simulator predicts from the run's
# own mean pass times (ZB-H1 gains less where the weight pass is short), the measured idle (1 -
# time in forward/backward / step time, mean over stages, steps after the first; median over
# rounds) and the median step time (steps 3 on), then the step-time ratios interleaved / 1F1B,
# zb-h1 / 1F1B, zb-v / 1F1B and zb-v / zb-v with equal pass times. The measured idle also holds what is not a bubble (the optimizer step, transfers, the
# loss's trip to the host), the same for every schedule.
# Conditions matter: with more ranks than cores (p 4 on a 2-core machine) a stage also waits for a
# core, so there the idle is an upper bound and the ratio is noise; the script says so.
# VT_BENCH_PP="2" runs only p = 2.
set -uo pipefail
vit3d=$1
rounds=${2:-3}
py=${VT_REF_PYTHON:-/usr/bin/python3}
cores=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--model tiny --depth 8 --width 128 --heads 4 --img-size 64 --micro-batch-size 4
       --steps 10 --threads 1 --log-interval 100)
echo "bench_pipeline: model tiny, depth 8, width 128, 64 px, micro-batch 4, 10 steps, 1 thread" \
     "per rank, $cores cores, $rounds rounds per schedule"
for p in ${VT_BENCH_PP:-2 4}; do
  [ "$p" -gt "$cores" ] && echo "p $p: more ranks than the $cores cores: the stages also wait" \
    "for a core; the idle below is an upper bound and the ratio noise"
  for m in 8 16; do
    for r in $(seq "$rounds"); do
      for s in 1f1b interleaved zb-h1 zb-v zb-v-equal; do
        out=$work/p${p}m${m}_${s}_$r
        flags=(--pp-schedule "$s")
        [ "$s" = zb-v-equal ] && flags=(--pp-schedule zb-v --pp-pass-times equal)
        mpirun -np "$p" --oversubscribe "$vit3d" train "${model[@]}" --pp "$p" \
          --global-batch-size $((4 * m)) "${flags[@]}" --log-dir "$out" > "$out.log" 2>&1 ||
          { echo "FAIL: p $p m $m $s"; tail -5 "$out.log"; exit 1; }
      done
    done
    "$py" - "$work" "$p" "$m" "$rounds" <<'PY'
import json, re, statistics, sys
work, p, m, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
res, sims, rebuilt = {}, {}, []
for s in ("1f1b", "interleaved", "zb-h1", "zb-v", "zb-v-equal"):
    idle, ms, sim = [], [], []
    for r in range(1, rounds + 1):
        base = f"{work}/p{p}m{m}_{s}_{r}"
        line = re.search(r"per stage:([ 0-9.]+); ideal bubble \S+ = ([0-9.]+).*simulated idle "
                         r"([0-9.]+)", open(base + ".log").read())
        idle.append(statistics.mean(float(x) for x in line.group(1).split()))
        ideal = float(line.group(2))
        sim.append(float(line.group(3)))
        # steps 3 on: zb-v takes the order built for its measured pass times after step 2
        ms.append(statistics.median(json.loads(l)["step_ms"] for l in list(open(base + "/metrics.jsonl"))[2:]))
        if s == "zb-v":  # whether the run took the order built for its measured pass times
            rebuilt.append("is now the one built" in open(base + ".log").read())
    res[s] = statistics.median(ms)
    sims[s] = statistics.median(sim)
    print(f"p {p} m {m:2d} {s:11s}: ideal idle {ideal:.3f}, simulated at the measured pass times "
          f"{statistics.median(sim):.3f}, measured {statistics.median(idle):.3f} "
          f"(rounds {' '.join(f'{x:.3f}' for x in idle)}), step {res[s]:.1f} ms")
for s, k in (("interleaved", 2 * m), ("zb-h1", 3 * m), ("zb-v", 6 * m)):  # k: the formula's passes
    print(f"p {p} m {m:2d} step time {s} / 1f1b = {res[s] / res['1f1b']:.3f} (ideal "
          f"{(k + p - 1) / k / ((m + p - 1) / m):.3f} with equal stages and free transfers, "
          f"{(1 - sims['1f1b']) / (1 - sims[s]):.3f} at the measured pass times)")
print(f"p {p} m {m:2d} step time zb-v (its order built for the pass times it measured, taken in "
      f"{sum(rebuilt)} of {rounds} rounds) / zb-v (--pp-pass-times equal) = "
      f"{res['zb-v'] / res['zb-v-equal']:.3f} (simulated "
      f"{(1 - sims['zb-v-equal']) / (1 - sims['zb-v']):.3f})")
PY
  done
done
