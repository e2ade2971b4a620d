"""The window protocol, shared by miners and validators: the run config and what a node builds from
it, window arithmetic and deadlines, announcements, the store's layout, update blobs, trajectories,
the aggregation rule, following and checking aggregates, sync and held-out loss
(docs/architecture.md)."""
