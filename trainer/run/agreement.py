"""What the ranks of a group must agree on, checked before they train together
(docs/design/ranks.md, "Ranks that disagree"). Ranks on several hosts are started
separately, each with its own flags; one started with another model, batch size, codec or
group size would otherwise crash mid-stream with a traceback, or hang in a collective the
others never join, or train silently otherwise than the rest. No torch here."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from trainer.config import TrainerConfig

# what may differ between ranks: where each rank runs and what it keeps for itself (its
# device, ports, logs, its pull cache's size and error-feedback memory, its local folders),
# and what only rank 0 uses (export timing, checkpoint cuts, holdout, the summary's files);
# the field list comes from rank 0 too, so --format and --label are compared only as given
LEARNER = (
    *("model", "k", "hidden", "update", "norm", "batch_size", "mlp_step_positives"),
    *("opt_w", "opt_v", "opt_emb", "opt_bias", "opt_mlp"),
)
PARALLEL = ("staleness", "dense_allreduce")
PS_ACCESS = ("push_codec", "pull_codec", "dense_codec", "mlp_moment_bits", "mlp_weight_bits", "cut_drain_codec")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def group_settings(conf: TrainerConfig, world: int) -> dict[str, str]:
    """This rank's settings that every rank of its group must share, by flag."""
    out = {"--world-size": str(world)}
    for section, names in ((conf.learner, LEARNER), (conf.parallel, PARALLEL), (conf.ps_access, PS_ACCESS)):
        out.update({flag(n): str(getattr(section, n)) for n in names})
    inp = conf.input
    out["--ps"] = f"{len(conf.ps_access.addresses())} shards"
    out["--model-name"] = conf.export.model_name
    out["--export-drain"] = str(conf.export.export_drain)
    out["--window"] = str(conf.progress.window)  # the merged metrics add each rank's share of it
    out["--max-samples"] = str(inp.max_samples)  # each rank trains its share of the limit
    out["--format"] = inp.format
    out["--label"] = str(inp.label)
    out["--schema"] = _digest(inp.schema) if inp.schema else "none"
    out["--follow"] = str(inp.follows())
    out["--source-pattern"] = inp.source_pattern
    out["--source-ignore"] = inp.source_ignore
    # a topic or a bucket prefix is named alike everywhere; a folder's path may be mounted
    # elsewhere on each host, so only its kind is compared
    remote = inp.source.startswith(("kafka://", "s3://"))
    out["--source"] = inp.source if remote else "stdin" if inp.source == "-" else "a local file or folder"
    return out


def _digest(path: str) -> str:
    """A schema file by its content (its path may differ between hosts)."""
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    except OSError as e:
        return f"unreadable ({e.strerror})"


def disagreements(lead: dict[str, str], mine: dict[str, str]) -> list[str]:
    """The settings in which `mine` differs from rank 0's `lead`, as 'FLAG VALUE (rank 0: VALUE)'."""
    return [f"{k} {mine.get(k, '(not set)')} (rank 0: {v})" for k, v in lead.items() if mine.get(k) != v]


def disagreement_message(rank: int, problems: Sequence[str]) -> str:
    return (
        f"rank {rank} was started with settings other than rank 0's: {'; '.join(problems)}. The ranks of a group train"
        " one model: start every rank with the same training flags (where each runs may differ: --device, ports,"
        " --metrics-out, --pull-cache-rows, --residual-rows, the local folders)"
    )


def shards_verdict(seen: Sequence[tuple[Sequence[str], Sequence[int]]]) -> str:
    """Whether every rank reaches the shards rank 0 reaches, from each rank's --ps addresses
    and the shards' incarnations it read, in rank order: "same" (the same processes,
    whatever each host calls them); "restarted" (the same addresses, a shard that restarted
    between the ranks' looks: the group starts again at the last cut); else why not (other
    addresses and other processes: another PS, which no restart mends)."""
    lead_addresses, lead_incarnations = seen[0]
    restarted = False
    for r, (addresses, incarnations) in enumerate(seen[1:], 1):
        if list(incarnations) == list(lead_incarnations):
            continue
        if list(addresses) != list(lead_addresses):
            return (
                f"--ps: rank {r} reaches other shard processes ({','.join(addresses)}) than rank 0"
                f" ({','.join(lead_addresses)}): every rank of a group trains against the same shards"
            )
        restarted = True
    return "restarted" if restarted else "same"


def folders_verdict(seen: Sequence[Sequence[str]]) -> str:
    """ "" where the ranks' folders can be one shared folder, from each rank's listing in rank
    order; else why not. The ranks split one folder's files, so a rank whose folder shares
    no file name with rank 0's (one of them not empty) reads another folder, a host's own or
    one not mounted: the files the split gives to the other ranks would never be read."""
    lead = set(seen[0])
    for r, names in enumerate(seen[1:], 1):
        if (names or lead) and not lead.intersection(names):
            return (
                f"--source: rank {r}'s folder holds {_files(len(names))} and rank 0's {_files(len(lead))}, and no name"
                " is in both: the ranks split one shared folder's files between them (each its share), so on folders of their own"
                " every rank would leave the files that fall to the others unread; mount the same folder on every"
                " host, or use a topic or an s3:// prefix"
            )
    return ""


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"
