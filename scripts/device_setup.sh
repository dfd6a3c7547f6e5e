#!/usr/bin/env bash
# Source this on a bare GPU machine that has Python 3.12, CuPy, NumPy, Numba and
# pytest but no registry: installs the wheels carried in .whl/ into /tmp/site,
# puts them and this repository on PYTHONPATH, and registers a Jupyter kernel.
#   . scripts/device_setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/site/bin:$PATH"
export PYTHONUNBUFFERED=1
python3 -m ipykernel install --user --name python3 >/dev/null || return 1
python3 -c "import cupy, plotly, nbval, jupytext, ipywidgets; print('device set up:', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
