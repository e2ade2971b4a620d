"""The names of the miner adversaries (`miners.adversaries.ADVERSARIES` holds their classes, in this
order), in a module that imports nothing: `miners.settings` offers them as `--miner.adversary`
choices before the miner loads torch and the model code."""

ADVERSARY_NAMES: tuple[str, ...] = (
    "idle",
    "noise",
    "copycat",
    "stale",
    "lazy",
    "withhold",
    "oldbase",
    "wrongdata",
    "forged",
    "scaled",
    "poison",
    "nan",
    "oversize",
    "pickle",
    "badsig",
    "unregistered",
    "replay",
)
