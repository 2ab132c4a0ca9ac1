#!/bin/sh
# ref_run.sh: CTest driver for the `ref` test (label ref): ref_dump writes vit3d's 5-step run,
# then ref_vit.py checks it against the PyTorch reference. Exits 77 (CTest SKIP_RETURN_CODE)
# when the Python has no torch, so machines without PyTorch skip instead of failing.
# Usage: ref_run.sh REF_DUMP REF_VIT_PY WORK_DIR   (VT_REF_PYTHON overrides /usr/bin/python3)
PY=${VT_REF_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, numpy" >/dev/null 2>&1; then
  echo "SKIP: $PY cannot import torch and numpy (Debian: apt-get install python3-torch)"
  exit 77
fi
mkdir -p "$3" || exit 1
# The class-token head, then the mean-pooled one (timm's global_pool='avg'), then timm's
# LayerScale, register tokens and no_embed_class, QK-norm without the qkv bias, parallel blocks,
# binary cross-entropy (soft and binary targets), the LAMB optimizer, the gap head without a
# class token, the MAP head, the tanh GELU (with the MAP head and a class token), dropout (with
# LayerScale), big_vision's fixed 2D sin-cos positions (with the gap head), the EMA with
# timm's ModelEmaV3 warmup, big_vision's pre-logits layer, and SGD with momentum.
"$1" "$3/ref_dump.safetensors" || { echo "FAIL: ref_dump exited with $?"; exit 1; }
"$PY" "$2" "$3/ref_dump.safetensors" || exit 1
for v in avg ls reg qk par bce bcet lamb gap map tanh drop sincos emaw pre sgd mom clip frz frzl lars larc; do  # ls: LayerScale, registers, no_embed_class;
                                    # reg: registers; qk: QK-norm without qkv bias; par:
                                    # parallel blocks; bce: binary cross-entropy (bcet: binary
                                    # targets); lamb: LAMB; gap: no class token, 2 registers,
                                    # the mean of the normalised patch tokens; map:
                                    # no class token, 1 register, the MAP head; tanh:
                                    # the tanh GELU, the MAP head with a class token;
                                    # drop: dropout, LayerScale; sincos: fixed
                                    # 2D sin-cos positions, the gap head; emaw:
                                    # the EMA with ModelEmaV3's warmup; pre: the
                                    # pre-logits layer, the gap head, head dropout;
                                    # sgd, mom: SGD with Nesterov or plain momentum;
                                    # clip: norm_pre, LayerNorm eps 1e-5, quick GELU; frz:
                                    # frozen embeddings and block 0 (AdamW); frzl: only the
                                    # last block, final norm and head train (LAMB); lars:
                                    # LARS with Nesterov momentum (timm's nlars); larc:
                                    # LARC with plain momentum (timm's larc)
  "$1" "$3/ref_dump_$v.safetensors" $v || { echo "FAIL: ref_dump $v exited with $?"; exit 1; }
  "$PY" "$2" "$3/ref_dump_$v.safetensors" || exit 1
done
