"""``gdn-review bundle``: an offline bundle that runs the checks and the bench on a GPU machine.

The command parses its options, calls ``export.bundle``, prints and picks the exit code;
``cli/main.py`` adds it to the group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    EXIT_OK,
    exit_codes,
    interruptible,
    kb_option,
    keyword_option,
    records_option,
    release_option,
    say,
    work_option,
)
from gdn_review.run.selection import load_records


@click.command(name="bundle")
@kb_option
@click.option(
    "--out",
    "bundle_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write (must not exist or be empty, unless --force).",
)
@records_option("A record to carry (repeatable).  [default: every record that is not a draft]")
@release_option(
    "--vllm",
    "versions",
    multiple=True,
    help_text="A release to carry (repeatable).  [default: the installed one "
    "and the base and head of every latency claim]",
)
@click.option(
    "--python",
    "python",
    default=None,
    metavar="X.Y",
    help="Python of the machine that runs it (picks the wheels).  "
    "[default: 3.12, the GPU machine's; this Python's with --dry-run]",
)
@click.option(
    "--max-mib",
    default=60,
    show_default=True,
    type=click.IntRange(min=1),
    help="Refuse to write a bundle bigger than this.",
)
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Then run it here on CPU, in a venv that has only PyTorch and "
    "the packages a GPU machine has, with no network: proves the "
    "bundle complete.",
)
@work_option("Where the dry run's environment and evidence go.  [default: a temp folder, kept]")
@click.option(
    "--dry-run-python",
    "source_python",
    default=None,
    metavar="PYTHON",
    help="The dry run's venv links this interpreter's PyTorch and "
    "packages (e.g. a venv with the GPU machine's torch 2.11).  "
    "[default: this one]",
)
@keyword_option(
    "With --dry-run: only the generated tests this pytest -k expression selects run "
    "(on the GPU machine: GDN_BUNDLE_KEYWORD)."
)
@exit_codes
@interruptible
def bundle_command(
    kb_dir,
    bundle_dir,
    keys,
    versions,
    python,
    max_mib,
    force,
    dry_run,
    work_dir,
    source_python,
    keyword,
) -> None:
    """Write an offline bundle that runs the generated checks and the bench on a GPU machine.

    The folder (at most --max-mib) holds the project and its generated tests,
    vLLM's Python files for each release carried (no compiled kernels), and
    wheels of every package vLLM's builder path imports beyond PyTorch,
    numpy, transformers, tokenizers, safetensors, jinja2, pyyaml, pytest,
    hypothesis, click, rich and tqdm. DIR/run.sh installs them into a temp
    folder with pip --no-index, probes each release's builder path, runs
    every record's generated tests (CPU and CUDA) with `matrix`, the bench on
    the GPU, and writes all evidence to one folder (see DIR/README.md).

    Exit 0 written (and, with --dry-run, the dry run passed), 1 the dry run
    failed, 2 bad input (too big, unknown release, a wheel not on the index).

    \b
    Examples:
      gdn-review bundle --out /tmp/gdn-bundle   # for the GPU machine (Python 3.12)
      gdn-review bundle --out /tmp/b --dry-run  # for this Python, then run it here offline
      # the dry run over another torch
      gdn-review bundle --out /tmp/b --dry-run --dry-run-python ~/torch-2.11/bin/python
      gdn-review bundle --out /tmp/b --record 52078 --vllm 0.28.0 --vllm 0.29.0
      gdn-review bundle --out /tmp/b --record 52078 --dry-run -k "C1 or snapshot"
      /tmp/gdn-bundle/run.sh /tmp/gpu-evidence  # on the GPU machine
    """
    from gdn_review.export import bundle

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if (source_python or keyword) and not dry_run:
        raise click.UsageError("--dry-run-python and -k go with --dry-run")
    python = python or (here if dry_run else bundle.DEFAULT_PYTHON)
    if dry_run and python != here:
        raise click.UsageError(
            f"--dry-run runs the bundle with this Python ({here}): leave out "
            f"--python or give {here}"
        )
    records = load_records(kb_dir, keys)
    ran = bundle.make_bundle(
        records,
        bundle_dir,
        list(versions),
        python,
        max_mib,
        force,
        bundle.DryRun(work_dir, source_python, keyword) if dry_run else None,
        say=say,
    )
    if ran is None:
        click.echo(f"wrote {bundle_dir}; on the GPU machine: {bundle_dir}/run.sh OUT")
        return
    code, out, offline = ran
    click.echo(
        f"dry run: run.sh exit {code}, "
        f"{'no network' if offline else 'network not cut'}; evidence in "
        f"{out}"
    )
    sys.exit(EXIT_OK if code == 0 else EXIT_FAILED)
