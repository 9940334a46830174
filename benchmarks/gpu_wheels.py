"""Pack the device machine's wheels small enough to travel, and rebuild them there.

The device tool copies the working tree and the carried paths, 64 MiB in all. The wheels the GPU queue installs
(.whl/: ogbench, mujoco, mujoco-mjx, gymnasium and what they need, about 31 MB) no longer fit beside the tracked
results, because a wheel is a zip of separately deflated files. Packed as one xz stream of the wheels' contents they
take about 20 MB:

    python benchmarks/gpu_wheels.py pack .whl .whlxz/wheels.tar.xz      # here, once (about a minute)
    run(command="bash benchmarks/gpu_queue.sh 540", carry=[".whlxz"])   # the queue unpacks it into .whl/

    python benchmarks/gpu_wheels.py unpack .whlxz/wheels.tar.xz .whl    # what the queue runs on the device

Each wheel is rebuilt as a zip with the same file members (names, order, contents and modes; directory entries are
dropped); a wheel's RECORD hashes
its members, not the zip, so pip installs the rebuilt wheel as the original.
"""

from __future__ import annotations

import argparse
import io
import lzma
import sys
import tarfile
import zipfile
from pathlib import Path


def pack(src: Path, out: Path) -> int:
    """Write every ``src/*.whl``'s members into one xz tar as ``WHEELNAME/MEMBER``; returns the number of wheels."""
    wheels = sorted(src.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"gpu_wheels: no *.whl in {src}; put the device's wheels there first")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        _pack_into(tmp, wheels)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out)  # atomic: a stopped pack leaves no half archive under the real name
    return len(wheels)


def _pack_into(tmp: Path, wheels: list[Path]) -> None:
    with tarfile.open(tmp, "w:xz", preset=9) as tar:
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                for info in z.infolist():
                    if info.is_dir():
                        continue
                    data = z.read(info)
                    t = tarfile.TarInfo(f"{w.name}/{info.filename}")
                    t.size, t.mode = len(data), (info.external_attr >> 16) & 0o777 or 0o644
                    t.mtime = 0
                    tar.addfile(t, io.BytesIO(data))


def unpack(archive: Path, dest: Path) -> int:
    """Rebuild the wheels packed in ``archive`` under ``dest``; returns the number of wheels."""
    if not archive.is_file():
        raise SystemExit(f"gpu_wheels: {archive} does not exist; pack it with `gpu_wheels.py pack .whl {archive}`")
    dest.mkdir(parents=True, exist_ok=True)
    zips: dict[str, zipfile.ZipFile] = {}
    try:
        with tarfile.open(archive, "r:xz") as tar:
            for t in tar:
                if not t.isfile():
                    continue
                wheel, _, member = t.name.partition("/")
                if not wheel.endswith(".whl") or "/" in wheel or not member:
                    raise SystemExit(f"gpu_wheels: {archive} holds {t.name!r}, not WHEEL.whl/MEMBER")
                if wheel not in zips:
                    zips[wheel] = zipfile.ZipFile(dest / (wheel + ".tmp"), "w", zipfile.ZIP_DEFLATED)
                info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (t.mode & 0o777) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zips[wheel].writestr(info, tar.extractfile(t).read())
    finally:
        for z in zips.values():
            z.close()
    for wheel in zips:
        (dest / (wheel + ".tmp")).replace(dest / wheel)
    return len(zips)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="WHEEL_DIR -> ARCHIVE (.tar.xz)")
    p.add_argument("src", type=Path)
    p.add_argument("out", type=Path)
    u = sub.add_parser("unpack", help="ARCHIVE -> WHEEL_DIR")
    u.add_argument("archive", type=Path)
    u.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "pack":
            n = pack(args.src, args.out)
            print(f"gpu_wheels: packed {n} wheels into {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
        else:
            n = unpack(args.archive, args.dest)
            print(f"gpu_wheels: rebuilt {n} wheels in {args.dest}")
    except (tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError, OSError) as e:  # a damaged archive or wheel
        raise SystemExit(f"gpu_wheels: {args.cmd} failed: {type(e).__name__}: {e}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
