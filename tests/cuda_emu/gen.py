#!/usr/bin/env python3
"""gen.py IN.cu OUT.cpp: rewrites CUDA launches k[<T>]<<<grid, block[, shm[, stream]]>>>(args) as
vt_emu::launch(k, grid, block[, shm[, stream]])(args), and dynamic shared memory declarations
`extern __shared__ [__align__(n)] T name[];` as `T *const name = (T *)vt_emu::dyn_smem();`, so
that the host C++ compiler builds the file against tests/cuda_emu/include. Nothing else changes
(line numbers included)."""
import os
import re
import sys

src = open(sys.argv[1]).read()
out = re.sub(r'(\w+(?:<[\w\s,:]*>)?)\s*<<<(.*?)>>>\s*\(',
             lambda m: 'vt_emu::launch(%s, %s)(' % (m.group(1), m.group(2)), src, flags=re.S)
out = re.sub(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w ]+?)\s+(\w+)\s*\[\s*\]\s*;',
             lambda m: '%s *const %s = (%s *)vt_emu::dyn_smem();' % (m.group(1), m.group(2),
                                                                     m.group(1)), out)
if '<<<' in out:
    sys.exit('gen.py: a launch in %s was not rewritten' % sys.argv[1])
if re.search(r'extern\s+__shared__', out):
    sys.exit('gen.py: an extern __shared__ declaration in %s was not rewritten' % sys.argv[1])
os.makedirs(os.path.dirname(os.path.abspath(sys.argv[2])), exist_ok=True)
open(sys.argv[2], "w").write('#line 1 "%s"\n' % sys.argv[1] + out)
