"""State Explorer: open stream-processing checkpoints and savepoints into pandas."""

__version__ = "0.1.0"
