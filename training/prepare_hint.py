"""The command that prepares a benchmark's data folder, for the errors about a missing or unprepared DATADIR,
MODEL or eval set to end with (the launchers' and the preflight's).

    python -m training.prepare_hint BENCHMARK FOLDER [--sample] [--image ENGINE IMAGE]

prints `./input_preprocessing/prepare_data.sh --outputdir FOLDER ...` with the flags the benchmark table gives
(`prepare_flags`, or `sample_flags` for the CPU-sized sample that the CPU_DEMO configs run on), BENCHMARK= in
front where the script's default (bert) is not it, and `docker run -it -v FOLDER:/data IMAGE` in front with
--image (the images set BENCHMARK). A DATADIR the full preparation makes as a subfolder of its --outputdir
(Llama 3.1 8B: OUTPUTDIR/data) is prepared from its parent. MODEL folders are a preparation's OUTPUTDIR/model:
`model_command` prepares the parent.

Only the standard library: the launchers run it on the host, where the image's Python may not be.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import PurePosixPath

from training import benchmarks

SCRIPT = "./input_preprocessing/prepare_data.sh"
TRUE = ("1", "true", "yes", "on")


def is_sample(environ) -> bool:
    """The CPU-sized configs (CPU_DEMO=1, as the trainers read it) run on the sample data."""
    return environ.get("CPU_DEMO", "0").strip().lower() in TRUE


Image = tuple[str, str] | None  # (engine, image): the command runs in the benchmark's image


def prepare_command(name: str, folder: str, sample: bool = False, image: Image = None) -> str:
    """The command that prepares `folder` as benchmark `name`'s DATADIR (`image`: (engine, image) to run it
    in the benchmark's container, `folder` mounted at /data)."""
    bench = benchmarks.runnable(name)
    path = PurePosixPath(folder)
    outdir, then = path, ""
    if not sample and bench.datadir_in_output:
        if path.name == bench.datadir_in_output:
            outdir = path.parent
        else:  # a DATADIR of another name: prepared into, then pointed at its subfolder
            then = f"; then export DATADIR={path / bench.datadir_in_output}"
    flags = bench.sample_flags if sample else bench.prepare_flags
    if image:
        engine, ref = image
        mount = shlex.quote(f"{outdir}:/data")
        cmd = f"{engine} run -it -v {mount} {shlex.quote(ref)} {SCRIPT} --outputdir /data"
    else:
        prefix = "" if bench.name == "bert" else f"BENCHMARK={bench.name} "
        cmd = f"{prefix}{SCRIPT} --outputdir {shlex.quote(str(outdir))}"
    return f"{cmd} {flags}".rstrip() + then


def model_command(name: str, model: str, sample: bool = False, image: Image = None) -> str:
    """The command that prepares the model folder `model` (a preparation's OUTPUTDIR/model)."""
    bench = benchmarks.runnable(name)
    parent = PurePosixPath(model).parent
    outdir = parent / bench.datadir_in_output if bench.datadir_in_output and not sample else parent
    return prepare_command(name, str(outdir), sample, image)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.prepare_hint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("benchmark")
    parser.add_argument("folder")
    parser.add_argument("--sample", action="store_true", help="the CPU-sized sample (CPU_DEMO configs)")
    parser.add_argument("--model", action="store_true", help="FOLDER is MODEL, not DATADIR")
    parser.add_argument("--image", nargs=2, metavar=("ENGINE", "IMAGE"), help="run it in the image")
    args = parser.parse_args(argv)
    make = model_command if args.model else prepare_command
    try:
        print(make(args.benchmark, args.folder, args.sample, tuple(args.image) if args.image else None))
    except ValueError as err:
        print(f"training.prepare_hint: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
