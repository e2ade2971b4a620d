"""The local network: `distrai localnet` runs a whole network on one machine (an embedded chain, a
directory store, miners and validators as processes) and shows it in the terminal; a tool room,
above the roles (docs/architecture.md)."""
