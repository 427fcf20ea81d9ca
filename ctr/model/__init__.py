"""Model families: the ModelSpec, the optimizers of PS tables, the training and scoring math of
each family, and the registry (`family(spec)`) that the trainer, serving and the router call
instead of comparing `spec.type` with strings. May import ctr.data and ctr.format; the torch
MLP (`mlp`) loads only for the DNN families."""
