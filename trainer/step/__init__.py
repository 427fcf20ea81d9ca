"""One batch through a model on the PS: pull its rows, predict (progressive metrics), train,
push; the pipeline that overlaps these RPCs with work; the row cache of bounded staleness and
the dense sync of the MLP. Imports ctr, ps.api and ps.client."""
