"""Daemon configuration: one frozen dataclass per daemon, built from defaults, then a YAML
file, then BOUNDLESS_<DAEMON>_<FIELD> environment variables, then command-line flags.

Fields may be str, int, float, bool or `str | None`; help text comes from field metadata.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
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
    hints = get_type_hints(cls)
    if examples:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = "examples:\n" + examples
    names = [f.name for f in dataclasses.fields(cls)]
    titled = {t: tuple(n for n in fields if n in names) for t, fields in (groups or {}).items()}
    listed = {n for fields in titled.values() for n in fields}
    titled["other settings"] = tuple(n for n in names if n not in listed and n not in SECURITY_FIELDS)
    titled["security (TLS, bearer tokens)"] = tuple(n for n in SECURITY_FIELDS if n in names)
    target: dict[str, Any] = {}
    for title, fields in titled.items():
        group = parser.add_argument_group(title) if groups else parser
        for name in fields:
            target[name] = group
    parser.add_argument("--config", type=Path, default=None, help="YAML file with settings (flags override it)")
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    for f in (by_name[n] for fields in titled.values() for n in fields):
        parser_of = target[f.name]
        flag = "--" + f.name.replace("_", "-")
        base, _ = _base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        # argparse expands %-formats in help: a literal "5%" would crash --help
        help_text = f"{f.metadata.get('help', '')} (default: {default})".replace("%", "%%")
        if base is bool:
            parser_of.add_argument(
                flag,
                dest=f.name,
                default=None,
                action=argparse.BooleanOptionalAction,
                help=help_text,
            )
        else:
            parser_of.add_argument(
                flag,
                dest=f.name,
                default=None,
                metavar=base.__name__.upper(),
                help=help_text,
            )


def build(
    cls: type[T],
    env_prefix: str,
    args: argparse.Namespace | None = None,
    yaml_path: Path | None = None,
    environ: dict[str, str] | None = None,
) -> T:
    """The config for cls from defaults < YAML < environment < flags."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    path = yaml_path or (getattr(args, "config", None) if args else None)
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        for k, v in loaded.items():
            key = str(k).replace("-", "_")
            if key not in names:
                raise _renamed(key, names, str(path))
            values[key] = _coerce(v, hints[key], f"{path}: {k}")
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
            values[name] = _coerce(env[var], hints[name], f"environment {var}")
    if args is not None:
        for name in names:
            v = getattr(args, name, None)
            if v is not None:
                values[name] = _coerce(v, hints[name], "--" + name.replace("_", "-"))
    conf = cls(**values)
    validate = getattr(conf, "validate", None)
    if validate is not None:
        validate()  # raises ConfigError naming the setting
    return conf
