"""Crafted tensor files for the memory-bomb tests."""

from __future__ import annotations

import io
import zipfile

import torch


def deflated_pt(inflated_bytes):
    """The bytes of a .pt whose data member is ``inflated_bytes`` of zeros, deflated (a zip bomb: ~1 MB of
    file per GiB once inflated); the rest is what torch.save writes for a 4-element tensor."""
    buffer = io.BytesIO()
    torch.save(torch.zeros(4), buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as bomb:
        for member in source.infolist():
            if member.filename.endswith("/data/0"):
                info = zipfile.ZipInfo(member.filename)
                info.compress_type = zipfile.ZIP_DEFLATED
                chunk = bytes(1024 ** 2)
                with bomb.open(info, "w", force_zip64=True) as handle:
                    for _ in range(inflated_bytes // len(chunk)):
                        handle.write(chunk)
            else:
                bomb.writestr(member, source.read(member.filename))
    return out.getvalue()
