// nvtx3/nvToolsExt.h of the CPU emulation (tests/cuda_emu): the two NVTX calls cuda_backend.cu
// makes. emu_runtime.cpp keeps the ranges' nesting (a pop with none open aborts, as a trainer's
// unbalanced ranges would garble a profile) and, with EMU_NVTX_REPORT=FILE, writes at exit each
// range name (digits as #) with its count and the deepest nesting, for tests.
#pragma once

int nvtxRangePushA(const char *message);
int nvtxRangePop(void);
