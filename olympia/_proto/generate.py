"""Regenerate the protobuf Python modules from proto/*.proto (``make proto``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
OUT_DIR = Path(__file__).resolve().parent
FILES = ("objects.proto", "actions.proto")


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on proto/ and return the generated files, written to ``out_dir``."""
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}"]
    if protoc.main([*args, *(str(PROTO_DIR / f) for f in FILES)]) != 0:
        raise SystemExit("protoc failed")
    return sorted(p for p in out_dir.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi")))


def stale_files() -> list[str]:
    """Names of generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [p.name for p in fresh if not (OUT_DIR / p.name).exists()
                or (OUT_DIR / p.name).read_bytes() != p.read_bytes()]


if __name__ == "__main__":
    if "--check" in sys.argv:
        stale = stale_files()
        if stale:
            raise SystemExit(f"stale generated protobuf code: {', '.join(stale)} (run make proto)")
    else:
        for path in generate(OUT_DIR):
            print(f"wrote {path.relative_to(ROOT)}")
