"""Llama 2 70B LoRA data and model preparation (what `prepare_data.sh` runs in the llama70b image). Its flags
and usage are `flags.py` (standard library only, so that --help needs no data library).
"""

from __future__ import annotations

import sys
from pathlib import Path

from input_preprocessing.common.runtime import GIB, PrepError, check_free_disk, log, remove_stale_tmp
from input_preprocessing.llama2_70b_lora import govreport, hub, layout, model, verify
from input_preprocessing.llama2_70b_lora.flags import parser

DISK_MARGIN = GIB


def prepare_full(outputdir: Path, model_revision: str = "main", disk_check: bool = True) -> list[str]:
    """Download, convert and check what is missing; returns the final check's problems."""
    data_dir, model_dir = outputdir / "data", outputdir / "model"
    remove_stale_tmp(data_dir)
    meta = layout.read_meta(data_dir) if data_dir.is_dir() else None
    if meta and meta.get("kind") != "mlperf":
        raise PrepError(
            f"{data_dir} holds the --sample data; choose another --outputdir for the MLCommons set"
        )
    expected = verify.mlperf_meta()
    data_done = not verify.check_data(data_dir, expected, full=True)
    model_done = not verify.check_model(model_dir, expected, full=False)
    if data_done and model_done:
        log(f"[prepare] {outputdir}: data and model already there and verified; nothing to download")
        return verify.verify(outputdir)
    token = hub.token()
    if not model_done and not token:
        raise PrepError(
            f"HF_TOKEN is not set: the Llama 2 70B weights ({model.REPO_ID}) are gated. Accept Meta's "
            f"licence at https://huggingface.co/{model.REPO_ID}, create a read token at "
            "https://huggingface.co/settings/tokens and pass it: docker run -e HF_TOKEN=hf_... "
            "(or export HF_TOKEN=hf_... before this command)"
        )
    need, data_remote, model_remote, model_sha = 0, [], [], ""
    if not data_done:
        _, data_remote = hub.list_files(
            govreport.REPO_ID, "dataset", govreport.REVISION, list(govreport.PARQUET.values()), token
        )
        need += sum(f.size for f in data_remote) + sum(s["size"] for s in govreport.SPLITS.values())
    if not model_done:
        model_sha, model_remote = hub.list_files(
            model.REPO_ID, "model", model_revision, model.PATTERNS, token
        )
        need += sum(f.size for f in model.remaining(model_dir, model_sha, model_remote))
    if disk_check:
        check_free_disk(outputdir, need + DISK_MARGIN, "the GovReport files and the Llama 2 70B safetensors")
    if not data_done:
        layout.write_meta(data_dir, govreport.prepare(data_dir, outputdir, data_remote, token))
    if not model_done:
        model.prepare(model_dir, model_sha, model_remote, token)
    return verify.verify(outputdir)


def main(argv: list[str] | None = None) -> int:
    flags = parser()
    args = flags.parse_args(argv)
    if args.base_steps < 0:
        flags.error(f"--base-steps {args.base_steps}: expected a count >= 0")
    if not args.sample and (args.seq_len is not None or args.tokenizer is not None or args.one_per_row):
        flags.error("--seq-len, --tokenizer and --one-per-row go with --sample (the MLCommons set is fixed)")
    outputdir = args.outputdir.resolve()
    try:
        if args.sample:
            from input_preprocessing.llama2_70b_lora.sample import make_sample

            meta = make_sample(outputdir, args.tokenizer, args.seq_len or 8192, one_per_row=args.one_per_row)
            train, valid = meta["splits"]["train"], meta["splits"]["validation"]
            log(
                f"[sample] {outputdir}/data: train {train['rows']} rows ({train['sequences']} sequences), "
                f"validation {valid['rows']} rows ({valid['sequences']}), {meta['seq_length']} tokens each, "
                f"vocabulary {meta['vocab_size']}, {meta['seconds']} s"
            )
            if args.base_steps:  # the base model the CPU default fine-tunes (a minute on one core)
                from input_preprocessing.llama2_70b_lora.sample_model import make_base_model

                make_base_model(outputdir, args.base_steps)
            problems = verify.verify(outputdir)
        else:
            problems = prepare_full(outputdir, args.model_revision, not args.no_disk_check)
    except PrepError as err:
        print(f"prepare_data.sh: error: {err}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"prepare_data.sh: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"prepare_data.sh: {outputdir} ready; export DATADIR={outputdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
