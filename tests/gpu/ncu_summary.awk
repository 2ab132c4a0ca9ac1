# tests/gpu/ncu_summary.awk: one line per kernel from Nsight Compute's text report (its
# SpeedOfLight, Occupancy, LaunchStats and WarpStateStats sections and the tensor and XU pipes'
# metrics), for tests/gpu/run.sh's summary: name and grid, duration, SM and memory throughput (%
# of peak), DRAM, tensor pipes active, XU pipe (the SFU's exponentials) busy, occupancy achieved
# of theoretical, registers, cycles per issue and the main stall the warp-state rule names.
function flush() {
  if (name == "") return
  printf "%s %s %s %s, SM %s%%, mem %s%% (DRAM %s%%), tensor %s%%, xu %s%%, occupancy %s%% of %s%%, regs %s, cycles/issue %s",
         name, grid, m["Duration"], unit, v("Compute (SM) Throughput"), v("Memory Throughput"),
         v("DRAM Throughput"), v("tensor"), v("xu"), v("Achieved Occupancy"), v("Theoretical Occupancy"),
         v("Registers Per Thread"), v("Warp Cycles Per Issued Instruction")
  if (stall != "") printf ", %s", stall
  printf "\n"
  stall = ""
  name = ""
  delete m
}
function v(k) { return (k in m) ? m[k] : "?" }
# The value is the last field (thousands separators dropped); the unit the one before it.
function take(key) { x = $NF; gsub(/,/, "", x); m[key] = x }
/, Context [0-9]+, Stream [0-9]+/ {
  flush()
  line = $0
  sub(/^ +/, "", line)
  sub(/^void /, "", line)
  name = line
  sub(/[(<].*/, "", name)
  sub(/ +$/, "", name)
  grid = ""
  if (match(line, /\([0-9]+, [0-9]+, [0-9]+\)x\([0-9]+, [0-9]+, [0-9]+\)/))
    grid = substr(line, RSTART, RLENGTH)
  gsub(/ /, "", grid)
  next
}
name == "" { next }
/^ +Duration +[a-z]+ +[0-9.,]+$/ { take("Duration"); unit = $(NF - 1); next }
/^ +Compute \(SM\) Throughput +% +[0-9.,]+$/ { take("Compute (SM) Throughput"); next }
/^ +Memory Throughput +% +[0-9.,]+$/ { take("Memory Throughput"); next }
/^ +DRAM Throughput +% +[0-9.,]+$/ { take("DRAM Throughput"); next }
/^ +Achieved Occupancy +% +[0-9.,]+$/ { take("Achieved Occupancy"); next }
/^ +Theoretical Occupancy +% +[0-9.,]+$/ { take("Theoretical Occupancy"); next }
/^ +Registers Per Thread +[a-z/]+ +[0-9.,]+$/ { take("Registers Per Thread"); next }
/^ +Warp Cycles Per Issued Instruction +[a-z]+ +[0-9.,]+$/ { take("Warp Cycles Per Issued Instruction"); next }
/^ +sm__pipe_tensor_op_hmma_cycles_active/ { take("tensor"); next }
/^ +sm__inst_executed_pipe_xu/ { take("xu"); next }
# The warp-state rule's main stall, said once in its text ("spends 8.3 cycles being stalled
# waiting for ...").
stall == "" && match($0, /spends [0-9.]+ cycles being stalled [^.(]*/) {
  stall = substr($0, RSTART, RLENGTH)
  sub(/ +$/, "", stall)
}
END { flush() }
