"""Run kernels: the spec of every file in kernels/, and compiling, launching, checking and timing them."""
