"""Where samples come from and how they become batches: the sources (a file, a folder of
rolling files, stdin, a Kafka topic) hand over blocks of whole lines with positions, the
reader parses them in a thread (the numba block parser), and the batch cache keeps parsed
batches. Imports ctr only."""
