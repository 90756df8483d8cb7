"""Prepare MLPerf BERT's data: `prepare_data.sh --outputdir DIR [--packed-data]` runs this. Its flags, usage
and stages are `flags.py` (standard library only, so that --help needs no data library).
"""

import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from input_preprocessing.common import r2
from input_preprocessing.common.checksums import file_hash
from input_preprocessing.common.runtime import (
    GIB,
    PrepError,
    Progress,
    check_free_disk,
    log,
    remove_stale_tmp,
    write_json_atomic,
)
from training.common.files import atomic_path, write_text_atomic

from . import download, wiki
from .flags import SAMPLE_VOCAB, parser
from .pretraining import PretrainingParams, make_part, text_file_to_sequences
from .ragged import write_unpacked
from .runtime import Markers, default_jobs, parallel_map
from .shards import gather_shards, make_plan, scatter_part
from .verify import (
    EVAL_FILE,
    MLCOMMONS_EVAL_SAMPLES,
    NVIDIA_EVAL_MD5,
    build_manifest,
    eval_set_problems,
    verify,
)

PACKED_DIR = "hdf5/packed_data"

# MLPerf's bert_config.json (BERT-Large uncased); json.dumps(indent=2) + newline is byte-identical to the
# published file (md5 checked below).
BERT_LARGE_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "max_position_embeddings": 512,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}

# Disk use per byte of training text, measured on the Wikipedia sample: one copy of the sequences (examples,
# scattered, or final shards) takes about 11x the text (dupe factor 10, 3 bytes per token, HDF5 overhead).
# At most two copies exist at once (scatter deletes each part's examples once it has copied them).
BYTES_PER_TEXT_BYTE = 12
PEAK_COPIES = 2
# Memory one worker may need (a 27 MB text part makes about 300k examples).
WORKER_MEMORY = {
    "wiki": 1 * GIB,
    "examples": 3 * GIB,
    "scatter": 2 * GIB,
    "shards": 2 * GIB,
    "manifest": GIB // 2,
}


@dataclass(frozen=True)
class Config:
    root: Path
    packed: bool = False
    shards: int = 4320
    skip_download: bool = False
    wiki_dump: Path | None = None
    text_dir: Path | None = None
    vocab: Path | None = None
    tf_checkpoint: Path | None = None
    eval_samples: int = 10_000
    eval_articles: int | None = None
    jobs: int | None = None
    metadata_url: str = download.MLCOMMONS_METADATA
    r2_downloader: Path | None = None  # MLCommons' mlc-r2-downloader.sh; None: fetched when needed
    keep_work: bool = False
    disk_check: bool = True
    kill_after: tuple[str, int] | None = None  # fault injection for the resume test
    params: PretrainingParams = PretrainingParams()

    @property
    def local(self) -> bool:
        """Inputs from this machine (a Wikipedia dump or a text folder) rather than MLCommons' download."""
        return self.wiki_dump is not None or self.text_dir is not None

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def shard_dir(self) -> Path:
        if self.packed:
            return self.root / PACKED_DIR
        return self.root / f"hdf5/training-{self.shards}/hdf5_{self.shards}_shards_varlength_shuffled"

    def settings(self) -> dict:
        """What the data depends on; a resumed run must match it."""
        source: dict = {"mirror": "mlcommons"}  # as when a second mirror existed: such folders resume
        if self.wiki_dump:
            source = {"wiki_dump": self.wiki_dump.name, "bytes": self.wiki_dump.stat().st_size}
        elif self.text_dir:
            files = sorted(self.text_dir.glob("part-*")) + [self.text_dir / "eval.txt"]
            source = {
                "text_dir": str(self.text_dir),
                "bytes": {p.name: p.stat().st_size for p in files if p.exists()},
            }
        vocab = self.vocab or (SAMPLE_VOCAB if self.local else None)
        return {
            "source": source,
            "vocab_md5": file_hash(vocab) if vocab else "downloaded",
            "shards": self.shards,
            "packed": self.packed,
            "eval_samples": self.eval_samples,
            "eval_articles": self.eval_articles,
            "tf_checkpoint": str(self.tf_checkpoint) if self.tf_checkpoint else None,
            "pretraining": dataclasses.asdict(self.params),
        }

    def jobs_for(self, stage: str) -> int:
        return self.jobs or default_jobs(WORKER_MEMORY[stage])


class Pipeline:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.markers = Markers(cfg.root)
        self.stats: dict = {}

    # -- helpers -------------------------------------------------------------------------------------------

    def _stage(self, name: str, fn) -> dict:
        done = self.markers.done(name)
        if done is not None:
            log(f"[{name}] already done, skipping")
            self.stats[name] = done
            return done
        start = time.monotonic()
        log(f"[{name}] starting")
        result = fn() or {}
        result["seconds"] = round(time.monotonic() - start, 1)
        self.markers.mark(name, result)
        self.stats[name] = result
        log(f"[{name}] done in {result['seconds']} s")
        return result

    def _killer(self, stage: str):
        """Callback that kills this process after N items of `stage` (--debug-kill-after STAGE:N)."""
        if not self.cfg.kill_after or self.cfg.kill_after[0] != stage:
            return None
        count = [0]

        def on_done(_result) -> None:
            count[0] += 1
            if count[0] >= self.cfg.kill_after[1]:
                log(f"[{stage}] --debug-kill-after: killing the run after {count[0]} items")
                os.kill(os.getpid(), signal.SIGKILL)

        return on_done

    def text_dir(self) -> Path:
        if self.cfg.text_dir:
            return self.cfg.text_dir
        return self.cfg.work / "text" if self.cfg.wiki_dump else self.cfg.root / download.TEXT_DIR

    def text_parts(self) -> list[Path]:
        parts = sorted(
            p for p in self.text_dir().glob("part-*-of-*") if re.fullmatch(r"part-\d+-of-\d+", p.name)
        )
        if not parts:
            raise PrepError(f"{self.text_dir()}: no text parts (part-NNNNN-of-MMMMM)")
        return parts

    def example_files(self) -> list[Path]:
        return [self.cfg.work / "examples" / f"{p.name}.h5" for p in self.text_parts()]

    def tf_checkpoint(self) -> Path | None:
        if self.cfg.tf_checkpoint:
            return self.cfg.tf_checkpoint
        if self.cfg.local:
            return None
        return self.cfg.root / "phase1" / download.CHECKPOINT

    # -- stages --------------------------------------------------------------------------------------------

    def inputs(self) -> dict:
        cfg = self.cfg
        phase1 = cfg.root / "phase1"
        if cfg.local:
            vocab = cfg.vocab or SAMPLE_VOCAB
            if not vocab.is_file():
                raise PrepError(f"--vocab {vocab}: no such file")
            with atomic_path(phase1 / "vocab.txt") as tmp:
                shutil.copyfile(vocab, tmp)
            text = json.dumps(BERT_LARGE_CONFIG, indent=2) + "\n"
            write_text_atomic(phase1 / "bert_config.json", text)
            if file_hash(phase1 / "bert_config.json") != download.PUBLISHED_MD5["bert_config.json"]:
                raise AssertionError("BERT_LARGE_CONFIG no longer matches MLPerf's bert_config.json")
            stats = {}
            if cfg.wiki_dump:
                stats = wiki.wiki_to_text(
                    cfg.wiki_dump, cfg.work, self.text_dir(), cfg.eval_articles, cfg.jobs_for("wiki")
                )
        elif cfg.skip_download:
            stats = download.check_inputs(cfg.root)
        else:
            stats = download.download_inputs(cfg.root, cfg.metadata_url, cfg.r2_downloader, cfg.disk_check)
        parts = self.text_parts()
        if not (self.text_dir() / "eval.txt").is_file():
            raise PrepError(f"{self.text_dir() / 'eval.txt'}: missing (the held-out eval text)")
        stats["text_parts"] = len(parts)
        stats["text_bytes"] = sum(p.stat().st_size for p in parts)
        return stats

    def examples(self) -> dict:
        cfg = self.cfg
        vocab = cfg.root / "phase1" / "vocab.txt"
        out_dir = cfg.work / "examples"
        remove_stale_tmp(out_dir)
        tasks = [(t, vocab, o, cfg.params) for t, o in zip(self.text_parts(), self.example_files())]
        jobs = cfg.jobs_for("examples")
        log(f"[examples] {len(tasks)} text parts, {jobs} workers")
        results = parallel_map(
            make_part, tasks, jobs, Progress("examples", len(tasks), "parts"), self._killer("examples")
        )
        return {
            "sequences": sum(r["sequences"] for r in results),
            "tokens": sum(r["tokens"] for r in results),
            "bytes": sum(f.stat().st_size for f in self.example_files()),
        }

    def eval(self) -> dict:
        cfg = self.cfg
        seqs = text_file_to_sequences(
            self.text_dir() / "eval.txt", cfg.root / "phase1" / "vocab.txt", cfg.params
        )
        available, wanted = len(seqs), cfg.eval_samples
        if available <= wanted:
            if available < wanted:
                log(
                    f"[eval] only {available} eval samples available (asked for {wanted}): taking all of them"
                )
            picked = list(range(available))
        else:
            # MLCommons' pick_eval_samples.py: evenly spaced picks, records[int(i * total / wanted)].
            ratio = available / wanted
            picked = [int(i * ratio) for i in range(wanted)]
        write_unpacked(cfg.root / EVAL_FILE, seqs.take(np.asarray(picked, dtype=np.int64)))
        if not cfg.local and cfg.eval_samples == MLCOMMONS_EVAL_SAMPLES:
            # MLCommons' text: the eval set must be the one every submission evaluates on, NVIDIA's.
            problems = eval_set_problems(cfg.root / EVAL_FILE)
            if problems:
                raise PrepError(problems[0])
            log(f"[eval] the eval set is MLPerf's: NVIDIA's published digest {NVIDIA_EVAL_MD5} (hdf5_md5.py)")
        return {"available": available, "samples": len(picked)}

    def plan(self) -> dict:
        cfg = self.cfg
        stats = make_plan(
            self.example_files(), cfg.work / "plan.h5", cfg.shards, cfg.packed, cfg.params.max_seq_length
        )
        if cfg.packed:
            log(
                f"[plan] packed {stats['sequences']} sequences into {stats['rows']} rows: "
                f"{stats['sequences_per_row']:.3f} sequences per row (at best "
                f"{stats['best_possible_sequences_per_row']:.3f}), {stats['token_fill']:.1%} of tokens used"
            )
        return stats

    def scatter(self) -> dict:
        cfg = self.cfg
        out_dir = cfg.work / "scatter"
        remove_stale_tmp(out_dir)
        tasks = [(e, cfg.work / "plan.h5", out_dir / e.name, cfg.keep_work) for e in self.example_files()]
        jobs = cfg.jobs_for("scatter")
        parallel_map(
            scatter_part, tasks, jobs, Progress("scatter", len(tasks), "parts"), self._killer("scatter")
        )
        return {"parts": len(tasks)}

    def shards(self) -> dict:
        cfg = self.cfg
        folder = cfg.shard_dir
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(folder)
        scattered = [cfg.work / "scatter" / e.name for e in self.example_files()]
        jobs = cfg.jobs_for("shards")
        per_shard = sum(p.stat().st_size for p in scattered) / cfg.shards
        group = max(1, min(-(-cfg.shards // (4 * jobs)), int(512 * 2**20 // max(per_shard, 1))))
        tasks = [
            (scattered, a, min(a + group, cfg.shards), cfg.shards, cfg.packed, folder)
            for a in range(0, cfg.shards, group)
        ]
        log(f"[shards] {cfg.shards} shards in {len(tasks)} groups, {jobs} workers -> {folder}")
        parallel_map(
            gather_shards, tasks, jobs, Progress("shards", len(tasks), "groups"), self._killer("shards")
        )
        return {"shards": cfg.shards, "folder": str(folder.relative_to(cfg.root))}

    def checkpoint(self) -> dict:
        prefix = self.tf_checkpoint()
        if prefix is None:
            log("[checkpoint] no TF1 checkpoint with local text (pass --tf-checkpoint PREFIX to convert one)")
            return {"converted": False}
        from .tf_checkpoint import convert, save_torch

        cfg_json = json.loads((self.cfg.root / "phase1" / "bert_config.json").read_text())
        out = self.cfg.root / "phase1" / f"{prefix.name}.pt"
        state = convert(prefix, cfg_json)
        save_torch(state, out)
        return {"converted": True, "tensors": len(state), "output": str(out.relative_to(self.cfg.root))}

    def manifest(self) -> dict:
        cfg = self.cfg
        rels = [
            p.relative_to(cfg.root).as_posix() for p in sorted((cfg.root / "phase1").iterdir()) if p.is_file()
        ]
        data_dirs = [cfg.shard_dir.relative_to(cfg.root).as_posix(), str(Path(EVAL_FILE).parent)]
        for folder in data_dirs:
            remove_stale_tmp(cfg.root / folder)
            rels += [p.relative_to(cfg.root).as_posix() for p in sorted((cfg.root / folder).iterdir())]
        info = {"settings": cfg.settings(), "stats": self.stats}
        build_manifest(cfg.root, rels, data_dirs, info, cfg.jobs_for("manifest"))
        problems = verify(cfg.root)
        if problems:
            raise PrepError("the prepared data failed verification:\n  " + "\n  ".join(problems))
        return {"files": len(rels)}

    # -- driver --------------------------------------------------------------------------------------------

    def check_settings(self) -> None:
        path = self.markers.folder / "settings.json"
        current = json.loads(json.dumps(self.cfg.settings()))
        if path.exists():
            before = json.loads(path.read_text())
            changed = sorted(k for k in set(before) | set(current) if before.get(k) != current.get(k))
            if changed:
                diff = "; ".join(f"{k}: {before.get(k)} before, {current.get(k)} now" for k in changed)
                raise PrepError(
                    f"{self.cfg.root} holds a run with other settings ({diff}); use a new --outputdir, "
                    f"or remove {self.cfg.root}/.prep and {self.cfg.root}/work to start over"
                )
        else:
            # A first run must not mistake someone else's files for its own finished outputs.
            hdf5 = self.cfg.root / "hdf5"
            if hdf5.exists() and any(p.is_file() for p in hdf5.rglob("*")):
                raise PrepError(
                    f"{hdf5} already holds files that this tool did not make (no {path}); "
                    "use an empty --outputdir, or move them away"
                )
            write_json_atomic(path, current)

    def check_disk(self) -> None:
        cfg = self.cfg
        if not cfg.disk_check:
            return
        if cfg.wiki_dump:
            text_bytes = int(cfg.wiki_dump.stat().st_size * 1.6)  # bz2 XML -> plain text, measured
        elif cfg.text_dir:
            text_bytes = sum(p.stat().st_size for p in cfg.text_dir.glob("part-*"))
        elif (cfg.root / download.TEXT_DIR).is_dir():
            text_bytes = sum(p.stat().st_size for p in (cfg.root / download.TEXT_DIR).glob("part-*"))
        else:
            text_bytes = download.TEXT_BYTES_ESTIMATE
        needed = 0 if self.markers.done("shards") else PEAK_COPIES * BYTES_PER_TEXT_BYTE * text_bytes
        if not cfg.local and not self.markers.done("inputs"):
            checkpoint = download.PUBLISHED_BYTES[f"{download.CHECKPOINT}.data-00000-of-00001"]
            needed += download.TEXT_BYTES_ESTIMATE + checkpoint  # the inputs kept
            # Each dataset is downloaded whole, then trimmed: the inputs' unused files, the text's archives.
            text_peak = checkpoint + download.TEXT_ARCHIVES_BYTES_ESTIMATE + download.TEXT_BYTES_ESTIMATE
            needed = max(needed, download.INPUT_DATASET_BYTES, text_peak)
        check_free_disk(cfg.root, int(needed), "downloads, intermediates and the final shards")

    def run(self) -> dict:
        cfg = self.cfg
        cfg.root.mkdir(parents=True, exist_ok=True)
        self.check_settings()
        self.check_disk()
        t0 = time.monotonic()
        for name in ("inputs", "examples", "eval", "plan", "scatter", "shards", "checkpoint", "manifest"):
            self._stage(name, getattr(self, name))
        if not cfg.keep_work and cfg.work.exists():
            shutil.rmtree(cfg.work)
        self.report(time.monotonic() - t0)
        return self.stats

    def report(self, seconds: float) -> None:
        s, cfg = self.stats, self.cfg
        lines = [
            f"BERT data ready in {cfg.root} ({seconds:.0f} s this run)",
            f"  training: {s['examples']['sequences']} sequences -> {cfg.shards} shards in {cfg.shard_dir}",
        ]
        if cfg.packed:
            p = s["plan"]
            lines.append(
                f"  packing: {p['rows']} rows, {p['sequences_per_row']:.3f} sequences per row "
                f"(upper bound {p['best_possible_sequences_per_row']:.3f}), {p['token_fill']:.1%} token fill"
            )
        lines.append(
            f"  eval: {s['eval']['samples']} samples (of {s['eval']['available']}) in {cfg.root / EVAL_FILE}"
        )
        ck = s["checkpoint"]
        lines.append(
            f"  checkpoint: {cfg.root / ck['output']}" if ck.get("converted") else "  checkpoint: none"
        )
        lines.append(
            f"  manifest: {cfg.root / 'manifest.json'} (check with python -m input_preprocessing.bert.verify)"
        )
        log("\n".join(lines))


def parse_args(argv: list[str] | None = None) -> Config:
    flags = parser()
    args = flags.parse_args(argv)
    counts = ("shards", "eval_samples", "jobs", "eval_articles", "max_seq_length", "max_predictions_per_seq")
    for name in counts:
        value = getattr(args, name)
        if value is not None and value < 1:
            flags.error(f"--{name.replace('_', '-')} must be at least 1 (got {value})")
    if args.wiki_dump and args.text_dir:
        flags.error("--wiki-dump and --text-dir exclude each other (two sources of text)")
    local = args.wiki_dump or args.text_dir
    if (args.vocab or args.tf_checkpoint) and not local:
        flags.error("--vocab and --tf-checkpoint go with local text (MLCommons' download brings its own)")
    if args.eval_articles and not args.wiki_dump:
        flags.error("--eval-articles goes with --wiki-dump")
    params = PretrainingParams()
    if args.max_seq_length or args.max_predictions_per_seq:
        if not local:
            flags.error(
                "--max-seq-length and --max-predictions-per-seq go with local text "
                "(MLPerf's data is 512 tokens, 76 predictions)"
            )
        if args.max_seq_length and not 16 <= args.max_seq_length <= params.max_seq_length:
            flags.error(f"--max-seq-length {args.max_seq_length}: expected 16 to {params.max_seq_length}")
        params = dataclasses.replace(
            params,
            max_seq_length=args.max_seq_length or params.max_seq_length,
            max_predictions_per_seq=args.max_predictions_per_seq or params.max_predictions_per_seq,
        )
    if local and args.skip_download:
        flags.error(
            "--skip-download is for MLCommons' inputs; local text (--wiki-dump, --text-dir) downloads nothing"
        )
    return Config(
        root=args.outputdir.resolve(),
        packed=args.packed_data,
        shards=args.shards,
        skip_download=args.skip_download,
        wiki_dump=args.wiki_dump.resolve() if args.wiki_dump else None,
        text_dir=args.text_dir.resolve() if args.text_dir else None,
        vocab=args.vocab.resolve() if args.vocab else None,
        tf_checkpoint=args.tf_checkpoint.resolve() if args.tf_checkpoint else None,
        eval_samples=args.eval_samples,
        eval_articles=args.eval_articles,
        jobs=args.jobs,
        metadata_url=(args.metadata_url or download.MLCOMMONS_METADATA).rstrip("/"),
        r2_downloader=Path(os.environ[r2.ENV]).resolve() if os.environ.get(r2.ENV) else None,
        keep_work=args.keep_work,
        disk_check=not args.no_disk_check,
        kill_after=args.debug_kill_after,
        params=params,
    )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        if cfg.wiki_dump and not cfg.wiki_dump.is_file():
            raise PrepError(f"--wiki-dump {cfg.wiki_dump}: no such file")
        if cfg.text_dir and not cfg.text_dir.is_dir():
            raise PrepError(f"--text-dir {cfg.text_dir}: no such folder")
        if cfg.r2_downloader and not cfg.r2_downloader.is_file():
            raise PrepError(f"R2_DOWNLOADER={cfg.r2_downloader}: no such file")
        Pipeline(cfg).run()
    except (PrepError, ValueError, FileNotFoundError) as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
