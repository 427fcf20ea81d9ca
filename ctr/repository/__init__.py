"""The repository contract, in one place: the typed JSON files of exports and versions
(`schemas`), the `<root>/<model>/<version>/` layout with its policy and counter (`versions`),
local or S3 storage, and holdouts. The trainer writes it, the manager publishes into it,
serving reads it. May import ctr.data, ctr.format and ctr.model."""
