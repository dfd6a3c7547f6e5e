"""The analytic models the chapters teach: memory traffic, coalescing, banks, register tiles,
pipelines, waves. They need no GPU (a few read the machine code of an offline compile)."""
