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

`--drop GLOB` (repeatable) leaves out the members a device run never reads, and their lines in the wheel's RECORD, so
pip installs the rest as usual. The queue's rows (pointmaze, antmaze) never load the manipulation meshes, 38 MB of
ogbench's 38.2 MB unpacked:

    python benchmarks/gpu_wheels.py pack .whl .whlxz/wheels.tar.xz --drop 'ogbench/manipspace/descriptions/*/assets/*'

(16 MB instead of 19 MB.) The wheels are not tracked; on a machine without them, fetch them first (cp312, as the
device's Python; mujoco-studio is left out, nothing imports it):

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
      ogbench==1.2.2 mujoco==4.0.0 mujoco-core==4.0.0 mujoco-mjx==3.17.0 gymnasium==1.4.0 \
      farama-notifications==0.0.6 glfw==2.11.0 pyopengl==3.1.10 trimesh==5.2.0
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import lzma
import sys
import tarfile
import zipfile
from pathlib import Path


def pack(src: Path, out: Path, drop: tuple[str, ...] = ()) -> int:
    """Write every ``src/*.whl``'s members into one xz tar as ``WHEELNAME/MEMBER``, less the members matching a ``drop``
    glob (and their RECORD lines); returns the number of wheels."""
    wheels = sorted(src.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"gpu_wheels: no *.whl in {src}; put the device's wheels there first")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        _pack_into(tmp, wheels, drop)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out)  # atomic: a stopped pack leaves no half archive under the real name
    return len(wheels)


def _dropped(name: str, drop: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in drop)


def _pack_into(tmp: Path, wheels: list[Path], drop: tuple[str, ...]) -> None:
    unused = set(drop)  # a glob that matches no member is a typo: refused, rather than a silently larger archive
    with tarfile.open(tmp, "w:xz", preset=9) as tar:
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                for info in z.infolist():
                    if info.is_dir():
                        continue
                    if _dropped(info.filename, drop):
                        unused -= {g for g in unused if fnmatch.fnmatchcase(info.filename, g)}
                        continue
                    data = z.read(info)
                    if drop and info.filename.endswith(".dist-info/RECORD"):  # RECORD: path,hash,size per line
                        lines = data.decode().splitlines(keepends=True)
                        data = "".join(ln for ln in lines if not _dropped(ln.split(",", 1)[0], drop)).encode()
                    t = tarfile.TarInfo(f"{w.name}/{info.filename}")
                    t.size, t.mode = len(data), (info.external_attr >> 16) & 0o777 or 0o644
                    t.mtime = 0
                    tar.addfile(t, io.BytesIO(data))
    if unused:
        raise SystemExit(f"gpu_wheels: --drop {', '.join(sorted(unused))} matches no member of the wheels in "
                         f"{wheels[0].parent}; a glob is matched against member paths such as 'ogbench/__init__.py'")


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
    p.add_argument("--drop", action="append", default=[], metavar="GLOB",
                   help="leave out the wheel members matching GLOB (and their RECORD lines); repeatable")
    u = sub.add_parser("unpack", help="ARCHIVE -> WHEEL_DIR")
    u.add_argument("archive", type=Path)
    u.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "pack":
            n = pack(args.src, args.out, tuple(args.drop))
            print(f"gpu_wheels: packed {n} wheels into {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
        else:
            n = unpack(args.archive, args.dest)
            print(f"gpu_wheels: rebuilt {n} wheels in {args.dest}")
    except (tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError, OSError) as e:  # a damaged archive or wheel
        raise SystemExit(f"gpu_wheels: {args.cmd} failed: {type(e).__name__}: {e}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
