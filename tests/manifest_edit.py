#!/usr/bin/env python3
"""manifest_edit.py MANIFEST [EDIT...]: edits a checkpoint's manifest.txt as the tests need and
seals it again (its second line, manifest_crc32, is the CRC-32 of the text after it: a manifest
edited without that reads as damaged).

EDIT: key=value sets the key's line (added where absent), -key deletes its lines, --unseal
leaves the seal out (a manifest of a vit3d before 2026-12-07). Without edits: sealed again, as
after an edit of the file's other lines by hand (a file line's new size and CRC-32)."""
import sys
import zlib


def main():
    path, edits = sys.argv[1], sys.argv[2:]
    lines = [l for l in open(path).read().splitlines() if l and not l.startswith("manifest_crc32 ")]
    seal = True
    for e in edits:
        if e == "--unseal":
            seal = False
        elif e.startswith("-"):
            lines = [l for l in lines if l.split(" ", 1)[0] != e[1:]]
        else:
            key, value = e.split("=", 1)
            at = [i for i, l in enumerate(lines) if l.split(" ", 1)[0] == key]
            if at:
                lines[at[0]] = f"{key} {value}"
            else:
                lines.append(f"{key} {value}")
    body = "".join(l + "\n" for l in lines[1:])  # (lines[0] is the format line)
    seal_line = f"manifest_crc32 {zlib.crc32(body.encode()):08x}\n" if seal else ""
    open(path, "w").write(lines[0] + "\n" + seal_line + body)


if __name__ == "__main__":
    main()
