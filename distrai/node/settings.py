"""A node's settings, typed and read once: every flag in the style Bittensor operators know
(`--wallet.name`), its environment variable (`BT_WALLET_NAME`) and its default, as fields of a
pydantic-settings model. `NodeSettings` holds what a miner and a validator share; each role's model
adds its own (`miners.settings.MinerSettings`, `validators.settings.ValidatorSettings`); the tools that
take some of the nodes' flags (`distrai doctor`, `distrai run publish`, `distrai dashboard`) have
models of those (`ChainSettings`, `HotkeySettings`, and fields taken `like` a node's).

How they are read: argparse parses the flags, each default left unset, and the model reads the
environment (each field's alias is its variable, matched case-sensitively) with the flags given taking
precedence: a flag, else its variable, else the default. An empty value, from a flag or a variable,
leaves a setting at its default. A value that does not fit is refused by flag name (`SettingsError`,
a `ValueError`). Not pydantic-settings' own command-line source: it names a nested model's fields
`--group.field`, where a node has `--device` beside `--device.memory_gib` (a field cannot be a value
and a group at once), and argparse's `--help`, which lists each flag with its variable, and its
refusals of a flag stay as operators know them.

`Settings.from_args` is the one reader of an argparse namespace by flag name; everything after it
reads typed fields. A `FlagSettings` model is one of flags alone, without variables (`distrai chain
init`'s subnet settings); its `given` names the flags given on the command line. This module imports
no torch, transformers or `bittensor` package: `--help` and the refusals of bad settings come before
any of them (`tests/test_startup.py`).
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from distrai.node.wallets import DEFAULT_WALLET_PATH


def setting(flag: str, env: str | None, default: Any, help: str | None, **argparse_options: Any) -> Any:
    """A field of a settings model: its `flag`, environment variable `env` (None in a `FlagSettings`,
    which reads no environment), `default` and `help` (None: the flag is listed without one), and
    what else argparse should know of the flag (`choices`, `action`, `metavar`, `type`; `aliases`, its
    other names)."""
    return Field(
        default, validation_alias=env, description=help, json_schema_extra={"flag": flag, **argparse_options}
    )


def like(model: type[Settings], name: str, *, help: str | None = None, default: Any = ...) -> Any:
    """A copy of `model`'s field `name` (its flag and environment variable), with another `help` or
    `default` where given: a tool that takes a node's flag with its own meaning."""
    field = copy.copy(model.model_fields[name])
    if help is not None:
        field.description = help
    if default is not ...:
        field.default = default
    return field


@dataclass(frozen=True)
class Flag:
    """One field of a settings model as a flag."""

    name: str
    """the model's field"""
    flag: str
    env: str | None
    """its environment variable; None in a `FlagSettings`"""
    default: Any
    help: str
    options: dict[str, Any]
    """argparse's other arguments of the flag"""

    @property
    def dest(self) -> str:
        """Where argparse puts the flag's value: `--wallet.name` in `wallet.name`."""
        return self.flag.removeprefix("--").replace("-", "_")


class SettingsError(ValueError):
    """Settings that do not fit, each named by its flag."""


class Settings(BaseSettings):
    """Read from the environment (each field's variable its alias) and the flags given (`from_args`)."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, frozen=True, extra="forbid")
    reads_environment: ClassVar[bool] = True
    """Each field has its variable; False in a `FlagSettings`, whose fields have none."""

    def __init__(self, **values: Any) -> None:
        """Settings given by field name (`netuid=3`). pydantic-settings reads the environment by each
        field's alias, its variable, and the field name too when a model takes fields by name: so the
        model takes aliases only, and this gives it the fields by theirs."""
        variables = {
            name: field.validation_alias
            for name, field in type(self).model_fields.items()
            if isinstance(field.validation_alias, str)
        }
        super().__init__(**{variables.get(name, name): value for name, value in values.items()})

    @classmethod
    def flags(cls) -> list[Flag]:
        found = []
        for name, field in cls.model_fields.items():
            extra = dict(field.json_schema_extra or {})  # type: ignore[arg-type]
            flag = str(extra.pop("flag"))
            env = field.validation_alias
            if cls.reads_environment:
                assert isinstance(env, str), f"{cls.__name__}.{name} names no variable"
            else:
                assert env is None, f"{cls.__name__}.{name} names a variable that it does not read"
            found.append(Flag(name, flag, env, field.default, field.description or "", extra))
        return found

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        """The model's flags, each with its variable (if it has one) in its help and no default (unset
        unless given)."""
        for flag in cls.flags():
            options = dict(flag.options)
            names = [*options.pop("aliases", ()), flag.flag]
            parser.add_argument(
                *names,
                dest=flag.dest,
                default=argparse.SUPPRESS,
                help=f"{flag.help} [env {flag.env}]" if flag.env else flag.help or None,
                **options,
            )

    @classmethod
    def parser(cls, prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=prog, description=description)
        cls.add_flags(parser)
        return parser

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        """The settings of the flags `args` holds (parsed by a parser of `add_flags`), over the
        environment's; `SettingsError` names the flag of each value that does not fit."""
        given = vars(args)
        values = {f.name: given[f.dest] for f in cls.flags() if given.get(f.dest, "") != ""}
        try:
            return cls(**values)
        except ValidationError as exc:
            raise SettingsError(refusal(cls, exc)) from None


def refusal(model: type[Settings], error: ValidationError) -> str:
    """What is wrong with the settings, by flag: a check's own words, else pydantic's."""
    flags = {f: flag for flag in model.flags() for f in (flag.name, flag.env)}
    said = []
    for problem in error.errors():
        if problem["type"] == "value_error":  # a validator's ValueError: it names its flag
            said.append(str(problem["ctx"]["error"]))
            continue
        flag = flags.get(str(problem["loc"][0])) if problem["loc"] else None
        where = "settings" if flag is None else flag.flag
        if flag is not None and flag.env:
            where += f" [env {flag.env}]"
        said.append(f"{where}: {problem['msg']}, got {problem['input']!r}")
    return "; ".join(said)


class FlagSettings(Settings):
    """Settings of flags alone, each `setting(flag, None, …)`: no environment variable is read. A
    flag left out is left at its default; `given` tells the two apart."""

    reads_environment: ClassVar[bool] = False

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)

    @property
    def given(self) -> frozenset[str]:
        """The fields whose flags were given (by `from_args`, or by name), whatever their values; the
        others hold their defaults."""
        return frozenset(self.model_fields_set)


class ChainSettings(Settings):
    """The subnet and the chain it is on."""

    netuid: int = setting("--netuid", "BT_NETUID", 1, "subnet id")
    subtensor_network: str = setting(
        "--subtensor.network",
        "BT_SUBTENSOR_NETWORK",
        "embedded",
        "finney, test, local (a subtensor node on 127.0.0.1:9944), a ws:// or wss:// URL, or embedded",
    )
    chain_path: str = setting(
        "--chain.path",
        "DISTRAI_CHAIN",
        "distrai-chain.db",
        "the embedded chain's file (with --subtensor.network embedded)",
    )


class WalletSettings(Settings):
    wallet_name: str = setting("--wallet.name", "BT_WALLET_NAME", "default", "wallet (coldkey) name")
    wallet_hotkey: str = setting("--wallet.hotkey", "BT_WALLET_HOTKEY", "default", "hotkey name")
    wallet_path: str = setting(
        "--wallet.path", "BT_WALLET_PATH", DEFAULT_WALLET_PATH, "folder of bittensor wallets"
    )


class HotkeySettings(WalletSettings, ChainSettings):
    """A wallet's hotkey on a subnet (`distrai.node.registration.register_command` names the command
    that registers it)."""


class NodeSettings(HotkeySettings):
    """What a miner and a validator share (`distrai.node.build.build_node` builds a node of them)."""

    store_url: str | None = setting(
        "--store.url",
        "DISTRAI_STORE_URL",
        None,
        "where this node publishes: file:///path or s3://bucket/prefix",
    )
    store_endpoint: str | None = setting(
        "--store.endpoint",
        "DISTRAI_STORE_ENDPOINT",
        None,
        "S3 endpoint URL (R2, MinIO, …); AWS S3 needs none",
    )
    store_bandwidth: float | None = setting(
        "--store.bandwidth",
        "DISTRAI_STORE_BANDWIDTH",
        None,
        "limit store traffic to this many bytes per second",
    )
    data_store: str | None = setting(
        "--data.store",
        "DISTRAI_DATA_STORE",
        None,
        "where to read the run's prepared data (a mirror: every shard is checked against its hash); "
        "default: the run config's data.store, else --store.url",
    )
    data_endpoint: str | None = setting(
        "--data.endpoint", "DISTRAI_DATA_ENDPOINT", None, "S3 endpoint URL of --data.store"
    )
    device: str = setting("--device", "DISTRAI_DEVICE", "cpu", "torch device: cpu, cuda, cuda:1, …")
    device_memory_gib: float | None = setting(
        "--device.memory_gib",
        "DISTRAI_DEVICE_MEMORY_GIB",
        None,
        "device memory to fit the training step in, in GiB (default: 90%% of the GPU's; on a CPU, no "
        "planning); the node picks micro-batches and activation checkpointing to fit (docs/gpu.md)",
    )
    run_config: str | None = setting(
        "--run.config", "DISTRAI_RUN_CONFIG", None, "the subnet owner's run config (TOML)"
    )
    work_dir: str | None = setting(
        "--work.dir",
        "DISTRAI_WORK_DIR",
        None,
        "where this node keeps its state (default ~/.distrai/<wallet>-<hotkey>)",
    )
    wandb_project: str | None = setting(
        "--wandb.project",
        "WANDB_PROJECT",
        None,
        "log metrics to this wandb project (offline without WANDB_API_KEY)",
    )
    wandb_entity: str | None = setting("--wandb.entity", "WANDB_ENTITY", None, "wandb entity (team or user)")
    max_windows: int | None = setting(
        "--max.windows",
        "DISTRAI_MAX_WINDOWS",
        None,
        "stop after this many windows (default: run until stopped)",
    )
    logging_level: str = setting(
        "--logging.level", "DISTRAI_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"
    )

    @field_validator("device_memory_gib", mode="before")
    @classmethod
    def _gib(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            gib = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"--device.memory_gib must be a number of GiB, got {value!r}") from None
        if not gib > 0:
            raise ValueError(f"--device.memory_gib must be positive, got {value!r}")
        return gib
