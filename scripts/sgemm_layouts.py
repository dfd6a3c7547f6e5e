"""helpers.sgemm in the four layouts (NN, NT, TN, TT: A and B as given or as transposed views)
against cupy.matmul on the same views, at n = 4096 and 8192, timed as the book times.

    python scripts/sgemm_layouts.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy  # noqa: E402

import helpers  # noqa: E402
from helpers.runtime.check import compare, random_matrix  # noqa: E402
from helpers.runtime.timing import time_fn  # noqa: E402


def main(sizes=(4096, 8192)) -> None:
    rng = cupy.random.default_rng()
    for n in sizes:
        X, Y = random_matrix(n, n, rng), random_matrix(n, n, rng)
        for lay in ("NN", "NT", "TN", "TT"):
            A = X.T if lay[0] == "T" else X
            B = Y.T if lay[1] == "T" else Y
            C = cupy.empty((n, n), cupy.float32)
            ok = compare(helpers.sgemm(A, B), cupy.matmul(A, B), A, B).ok
            mine = time_fn(lambda A, B, C: helpers.sgemm(A, B, C), [(A, B, C)], target_s=0.5)
            ref = time_fn(lambda A, B, C: cupy.matmul(A, B, out=C), [(A, B, C)], target_s=0.5)
            tf = 2 * n ** 3 / 1e9
            print(f"n = {n} {lay}: sgemm {tf / mine.ms:5.1f} TFLOP/s, cuBLAS {tf / ref.ms:5.1f}: "
                  f"{100 * ref.ms / mine.ms:5.1f}% of cuBLAS, {'correct' if ok else 'WRONG'}")


if __name__ == "__main__":
    main()
