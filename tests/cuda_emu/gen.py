#!/usr/bin/env python3
"""gen.py IN.cu OUT.cpp: rewrites CUDA launches k<<<grid, block[, shm[, stream]]>>>(args) as
vt_emu::launch(k, grid, block[, shm[, stream]])(args), so that the host C++ compiler builds the
file against tests/cuda_emu/include. Nothing else changes (line numbers included)."""
import os
import re
import sys

src = open(sys.argv[1]).read()
out = re.sub(r'(\w+)\s*<<<(.*?)>>>\s*\(',
             lambda m: 'vt_emu::launch(%s, %s)(' % (m.group(1), m.group(2)), src, flags=re.S)
if '<<<' in out:
    sys.exit('gen.py: a launch in %s was not rewritten' % sys.argv[1])
os.makedirs(os.path.dirname(os.path.abspath(sys.argv[2])), exist_ok=True)
open(sys.argv[2], "w").write('#line 1 "%s"\n' % sys.argv[1] + out)
