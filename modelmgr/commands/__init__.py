"""The version commands a person runs: pin, unpin, rollback, gc, show, diff, status and
eval, in process or sent to the manager daemon."""
