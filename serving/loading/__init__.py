"""Versions from the repository to servable models: serving's own checked copies, the
mmapped images under a delta overlay, the part a serving shard holds, and the watcher that
loads the target version and swaps it in. Imports ctr, serving.request and serving.scoring."""
