"""Daemon configuration: one frozen dataclass per daemon, built from defaults, then a YAML
file, then BOUNDLESS_<DAEMON>_<SETTING> environment variables, then command-line flags.

Fields may be str, int, float, bool or `str | None`, or a section: a field made with
`section()` whose type is itself such a dataclass. Every leaf has one flat name (its
section's prefix, then its own name), which is its flag (--batch-size), its environment
variable and its YAML key; a YAML file may also nest a section's settings under its name
(`training: {batch_size: 256}`). Help text comes from field metadata; a section's title is
its --help group. Every section's `validate`, then the daemon's, runs once it is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value of the wrong type or an unknown key, named with its source."""


# settings renamed so that one name means one thing on every daemon: the old name, in a YAML
# file or an environment variable, is refused with the new one named (flags: boundless.cli)
RENAMED_SETTINGS = {
    "workers": "grpc_threads",
    "tokens_file": "accepted_tokens_file",
    "full_every": "full_export_every",
    "shard": "shard_index",
    "shards": "shard_replicas",
}


def _renamed(key: str, names: set[str], where: str) -> ConfigError:
    new = RENAMED_SETTINGS.get(key)
    if new in names:
        return ConfigError(f"{where}: setting {key!r} is now {new!r}")
    return ConfigError(f"{where}: unknown setting {key!r}")


def _base_type(tp: Any) -> tuple[type, bool]:
    """(scalar type, optional?) of a field annotation."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _coerce(value: Any, tp: Any, where: str) -> Any:
    base, optional = _base_type(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where}: null is not allowed")
    if optional and isinstance(value, str) and value.lower() in ("", "none", "null"):
        return None
    try:
        if base is bool:
            if isinstance(value, bool):
                return value
            s = str(value).strip().lower()
            if s in ("1", "true", "yes", "on"):
                return True
            if s in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if base is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if base is float:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {value!r} is not a valid {base.__name__}") from None


def section(cls: type[T], title: str, prefix: str = "") -> T:
    """A field holding the settings of `cls`, shown in --help under `title`; `prefix` goes
    before its leaves' names (the trainer's in-process shards take the PS's row-lifecycle
    settings as --local-admit-after...)."""
    return dataclasses.field(default_factory=cls, metadata={"section": title, "prefix": prefix})  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One leaf of a config: its flat name (flag, environment, YAML key) and where it sits."""

    name: str
    path: tuple[str, ...]  # attribute names from the top config down to the leaf
    field: dataclasses.Field[Any]
    hint: Any
    group: str | None  # the title of the innermost titled section holding it


def _is_section(f: dataclasses.Field[Any]) -> bool:
    return "section" in f.metadata


def settings(cls: type, prefix: str = "", path: tuple[str, ...] = (), group: str | None = None) -> list[Setting]:
    """Every leaf of `cls`, sections flattened, in declaration order."""
    hints = get_type_hints(cls)
    out: list[Setting] = []
    for f in dataclasses.fields(cls):
        if _is_section(f):
            out += settings(hints[f.name], prefix + f.metadata["prefix"], (*path, f.name), f.metadata["section"] or group)
        else:
            out.append(Setting(prefix + f.name, (*path, f.name), f, hints[f.name], group))
    names = [s.name for s in out]
    if not path and len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: two settings share a name: {sorted({n for n in names if names.count(n) > 1})}")
    return out


def _sections(cls: type, prefix: str = "") -> dict[str, tuple[type, str]]:
    """The sections directly in `cls`: name -> (type, the prefix of its leaves)."""
    hints = get_type_hints(cls)
    return {f.name: (hints[f.name], prefix + f.metadata["prefix"]) for f in dataclasses.fields(cls) if _is_section(f)}


def _from_yaml(mapping: dict[Any, Any], cls: type, prefix: str, by_name: dict[str, Setting], where: str) -> dict[str, Any]:
    """Flat values from a YAML mapping of `cls`'s settings: flat names, or sections nested."""
    values: dict[str, Any] = {}
    sections = _sections(cls, prefix)
    for k, v in mapping.items():
        key = str(k).replace("-", "_")
        if key in sections and isinstance(v, dict):
            inner, inner_prefix = sections[key]
            values.update(_from_yaml(v, inner, inner_prefix, by_name, f"{where}: {k}"))
            continue
        name = prefix + key
        if name not in by_name:
            raise _renamed(name, set(by_name), where)
        values[name] = _coerce(v, by_name[name].hint, f"{where}: {k}")
    return values


def _construct(cls: type[T], values: dict[str, Any], prefix: str = "", top: bool = True) -> T:
    """`cls` from flat values, each section built first and checked: a section's
    `validate(prefix)` gets the prefix of its flags, the daemon's `validate()` none; both
    raise ConfigError naming the setting."""
    kwargs: dict[str, Any] = {}
    for name, (inner, inner_prefix) in _sections(cls, prefix).items():
        kwargs[name] = _construct(inner, values, inner_prefix, top=False)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not _is_section(f) and prefix + f.name in values:
            kwargs[f.name] = values[prefix + f.name]
    conf = cls(**kwargs)
    validate = getattr(conf, "validate", None)
    if validate is not None:
        validate() if top else validate(prefix)
    return conf


def from_settings(cls: type[T], settings_: dict[str, Any], where: str) -> T:
    """cls from flat setting names (the flags' names with underscores, as YAML takes
    them), each checked and coerced as a flag would be, then validated: the one config a
    Python caller builds (boundless.api) is the command line's. ConfigError names `where`."""
    by_name = {leaf.name: leaf for leaf in settings(cls)}
    values = _from_yaml(settings_, cls, "", by_name, where)
    return _construct(cls, values)


def to_flags(conf: Any) -> list[str]:
    """The command-line flags that build `conf` again (every setting that is not None), so
    a supervisor can start its workers with exactly its own config."""
    out: list[str] = []
    for leaf in settings(type(conf)):
        value = conf
        for attr in leaf.path:
            value = getattr(value, attr)
        if value is None:
            continue
        name = leaf.name.replace("_", "-")
        if isinstance(value, bool):
            out.append(f"--{name}" if value else f"--no-{name}")
        else:
            out += [f"--{name}", str(value)]
    return out


WRITES = "writes"  # a field's metadata key: the setting names a "folder" or a "file" its daemon writes


def _written(conf: Any) -> Iterator[tuple[str, str, str]]:
    """(setting name, "folder" or "file", path) of each local path `conf` names for writing
    (remote locations, s3://..., are left to their clients)."""
    for leaf in settings(type(conf)):
        kind = leaf.field.metadata.get(WRITES)
        value = conf
        for attr in leaf.path:
            value = getattr(value, attr)
        if kind is not None and value and "://" not in str(value):
            yield leaf.name, kind, str(value)


def output_paths(conf: Any) -> list[str]:
    """The local paths `conf` names for writing (files and folders), as given."""
    return [path for _, _, path in _written(conf)]


def check_outputs(conf: Any) -> None:
    """Makes every folder `conf` names for writing (and each written file's folder), and
    checks it can be written, as a daemon starts: a path that cannot be written is refused
    now, naming its flag, not after hours of work (a trainer's --metrics-out is written at
    its end). Remote locations (s3://...) are left to their clients."""
    for setting, kind, value in _written(conf):
        name = f"--{setting.replace('_', '-')} {value}"
        path = Path(value)
        folder = path if kind == "folder" else path.parent
        if kind == "file" and path.is_dir():
            raise ConfigError(f"{name}: a folder, where a file is to be written")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ConfigError(f"{name}: {folder} is a file, where a folder is needed") from None
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk passes: the daemon waits for space as it runs
                continue
            raise ConfigError(f"{name}: the folder {folder} cannot be made: {e.strerror}") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(f"{name}: the folder {folder} cannot be written (its permissions)")


def flag(name: str, prefix: str = "") -> str:
    """The flag of setting `name` in a section whose leaves take `prefix`."""
    return "--" + (prefix + name).replace("_", "-")


SECURITY_FIELDS = ("tls_cert", "tls_key", "tls_ca", "tls_client_auth", "accepted_tokens_file", "token_file")


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    groups: dict[str, tuple[str, ...]] | None = None,
    examples: str = "",
) -> None:
    """One --flag per field (default None so that unset flags do not override), in the
    titled `groups` in their order (the rest under "other settings", TLS and tokens last),
    with `examples` after the flags in --help."""
    if examples:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = "examples:\n" + examples
    leaves = settings(cls)
    names = [leaf.name for leaf in leaves]
    titled = {t: tuple(n for n in fields if n in names) for t, fields in (groups or {}).items()}
    listed = {n for fields in titled.values() for n in fields}
    for leaf in leaves:  # a section's title is its group, after the groups named
        if leaf.group and leaf.name not in listed and leaf.name not in SECURITY_FIELDS:
            titled[leaf.group] = (*titled.get(leaf.group, ()), leaf.name)
            listed.add(leaf.name)
    titled["other settings"] = tuple(n for n in names if n not in listed and n not in SECURITY_FIELDS)
    titled["security (TLS, bearer tokens)"] = tuple(n for n in SECURITY_FIELDS if n in names)
    grouped = bool(groups) or any(leaf.group for leaf in leaves)
    target: dict[str, Any] = {}
    for title, fields in titled.items():
        group = parser.add_argument_group(title) if grouped and fields else parser
        for name in fields:
            target[name] = group
    parser.add_argument("--config", type=Path, default=None, help="YAML file with settings (flags override it)")
    by_name = {leaf.name: leaf for leaf in leaves}
    for leaf in (by_name[n] for fields in titled.values() for n in fields):
        f = leaf.field
        parser_of = target[leaf.name]
        flag = "--" + leaf.name.replace("_", "-")
        base, _ = _base_type(leaf.hint)
        default = f.default if f.default is not dataclasses.MISSING else None
        # argparse expands %-formats in help: a literal "5%" would crash --help
        help_text = f"{f.metadata.get('help', '')} (default: {default})".replace("%", "%%")
        if base is bool:
            parser_of.add_argument(
                flag,
                dest=leaf.name,
                default=None,
                action=argparse.BooleanOptionalAction,
                help=help_text,
            )
        else:
            parser_of.add_argument(
                flag,
                dest=leaf.name,
                default=None,
                metavar=base.__name__.upper(),
                help=help_text,
            )


def _warn_unknown_env(env: Any, env_prefix: str, names: set[str]) -> None:
    """A variable of the daemon's prefix that names no setting (a typo in a pod spec) is
    said on stderr with the closest setting, where it was ignored without a word. Not an
    error: Kubernetes writes <SERVICE>_SERVICE_HOST, _PORT and the like for every Service
    of the namespace, and a Service named boundless-trainer makes them BOUNDLESS_TRAINER_*."""
    known = {f"{env_prefix}{n.upper()}" for n in names}
    for var in sorted(v for v in env if v.startswith(env_prefix) and v not in known):
        if "_SERVICE_" in var or var.endswith("_SERVICE") or "_PORT_" in var or var == f"{env_prefix}PORT":
            continue  # Kubernetes' service links
        close = difflib.get_close_matches(var, sorted(known), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"boundless: environment {var}: no such setting{hint}; ignored", file=sys.stderr)


def build(
    cls: type[T],
    env_prefix: str,
    args: argparse.Namespace | None = None,
    yaml_path: Path | None = None,
    environ: dict[str, str] | None = None,
) -> T:
    """The config for cls from defaults < YAML < environment < flags."""
    by_name = {leaf.name: leaf for leaf in settings(cls)}
    names = set(by_name)
    values: dict[str, Any] = {}
    path = yaml_path or (getattr(args, "config", None) if args else None)
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        values.update(_from_yaml(loaded, cls, "", by_name, str(path)))
    env = os.environ if environ is None else environ
    for old, new in RENAMED_SETTINGS.items():
        if old not in names and f"{env_prefix}{old.upper()}" in env:
            raise (
                _renamed(old, names, f"environment {env_prefix}{old.upper()}")
                if new in names
                else ConfigError(f"environment {env_prefix}{old.upper()}: unknown setting")
            )
    for name in names:
        var = f"{env_prefix}{name.upper()}"
        if var in env:
            values[name] = _coerce(env[var], by_name[name].hint, f"environment {var}")
    _warn_unknown_env(env, env_prefix, names)
    if args is not None:
        for name in names:
            v = getattr(args, name, None)
            if v is not None:
                values[name] = _coerce(v, by_name[name].hint, "--" + name.replace("_", "-"))
    return _construct(cls, values)
