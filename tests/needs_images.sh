#!/usr/bin/env bash
# needs_images.sh VIT3D: exits 77 (ctest's skip) where VIT3D decodes no PNG or no JPEG (a build
# with VT_PNG, or VT_JPEG and VT_STB, off: the GPU machine's bare build), the kinds of the images
# tests/make_images.py writes; 0 otherwise. A test that trains on those images runs
# `bash "$here/needs_images.sh" "$vit3d" || exit $?` first.
decoders=$("$1" --version) || { echo "FAIL: $1 --version"; exit 1; }
if grep -q "PNG none\|JPEG none" <<<"$decoders"; then
  echo "SKIP: $1 cannot decode the test's PNG and JPEG images ($decoders): build with libpng" \
       "and libjpeg (or stb_image)"
  exit 77
fi
exit 0
