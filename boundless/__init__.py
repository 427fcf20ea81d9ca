"""The `boundless` command and the local launcher behind `boundless demo`."""
